//! The hot calls, written against Node-API directly.
//!
//! A napi-rs class method finds its Rust struct with `napi_unwrap` (a
//! private-property lookup on `this`) and converts every argument and result
//! through checked helpers; together that costs several times the decision
//! itself. The hot calls are instead plain module functions,
//! `reserveHot(handle, nowMs)`, whose first argument is a pacer's handle: an
//! External holding the pacer's key in a [`Table`]. One `napi_get_cb_info`
//! yields the arguments and the table (the function's own data),
//! `napi_get_value_external` the key, `napi_get_value_double` the clock,
//! and `napi_create_double` returns the code. Being one function for every
//! pacer, each call site in `index.js` stays monomorphic.
//!
//! The External holds a key, never a pointer: any External passed in
//! (another addon's, say) is looked up and, unknown, refused with a
//! TypeError, so nothing is ever dereferenced on the caller's word. The
//! low bit of the key names the table, so a shared pacer's handle is
//! unknown to `reserveHot` and the other way round.

use std::cell::RefCell;
use std::ffi::{c_void, CString};
use std::ptr;
use std::rc::Rc;

use napi::bindgen_prelude::*;
use napi::sys;

/// The pacers one env's hot calls can reach, by key: `2·slot + tag`, the
/// tag (0 or 1) telling the tables apart. Slot 0 stays empty, so no key is
/// a null External. Lives on the env's JS thread only.
pub struct Table<T> {
    tag: usize,
    slots: RefCell<Vec<Option<Rc<T>>>>,
    free: RefCell<Vec<usize>>,
}

impl<T> Table<T> {
    pub fn new(tag: usize) -> Self {
        debug_assert!(tag < 2);
        Table {
            tag,
            slots: RefCell::new(vec![None]),
            free: RefCell::new(Vec::new()),
        }
    }

    /// Stores `value`; its key.
    fn insert(&self, value: Rc<T>) -> usize {
        let mut slots = self.slots.borrow_mut();
        let slot = match self.free.borrow_mut().pop() {
            Some(slot) => {
                slots[slot] = Some(value);
                slot
            }
            None => {
                slots.push(Some(value));
                slots.len() - 1
            }
        };
        2 * slot + self.tag
    }

    /// The slot of `key` when the key is this table's.
    fn slot(&self, key: usize) -> Option<usize> {
        (key & 1 == self.tag).then_some(key >> 1)
    }

    fn remove(&self, key: usize) {
        let Some(slot) = self.slot(key) else { return };
        let mut slots = self.slots.borrow_mut();
        if let Some(entry @ Some(_)) = slots.get_mut(slot) {
            *entry = None;
            self.free.borrow_mut().push(slot);
        }
    }

    /// `f` on the value of `key`, or `None` when there is none.
    fn with<R>(&self, key: usize, f: impl FnOnce(&T) -> R) -> Option<R> {
        match self.slots.borrow().get(self.slot(key)?) {
            Some(Some(value)) => Some(f(value)),
            _ => None,
        }
    }
}

/// A new External handle for `value` in `table`. The handle holds the slot
/// (and so one strong count of `value`) until it is garbage-collected.
pub fn handle<'env, T>(
    env: &'env Env,
    table: &Rc<Table<T>>,
    value: Rc<T>,
) -> Result<Unknown<'env>> {
    let key = table.insert(value);
    let hint = Rc::into_raw(Rc::clone(table)) as *mut c_void;
    let mut external = ptr::null_mut();
    // SAFETY: `env` is the live env of this call; the finalizer receives the
    // key as its data and the table pointer made above as its hint.
    let status = unsafe {
        sys::napi_create_external(
            env.raw(),
            key as *mut c_void,
            Some(release_slot::<T>),
            hint,
            &mut external,
        )
    };
    if status != sys::Status::napi_ok {
        table.remove(key);
        // SAFETY: `hint` came from `Rc::into_raw` and no finalizer owns it.
        drop(unsafe { Rc::from_raw(hint as *const Table<T>) });
        return Err(Error::new(
            Status::GenericFailure,
            "cannot create a pacer handle",
        ));
    }
    // SAFETY: `external` is a live value of `env`, returned to JS at once.
    Ok(unsafe { Unknown::from_raw_unchecked(env.raw(), external) })
}

/// Finalizer of a [`handle`]: frees its slot and gives back its count of
/// the table.
unsafe extern "C" fn release_slot<T>(_env: sys::napi_env, data: *mut c_void, hint: *mut c_void) {
    // SAFETY: `hint` is the pointer `handle` made with `Rc::into_raw`, and a
    // finalizer runs once.
    let table = unsafe { Rc::from_raw(hint as *const Table<T>) };
    table.remove(data as usize);
}

/// What a function made by [`table_function`] runs: its callback data is
/// a `*const T` from `Rc::into_raw` (a `Table` for the hot calls).
pub type HotCallback =
    unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

/// A new JS function named `name` that runs `callback` with `table` as its
/// callback data. The function holds one strong count of `table`, given
/// back by a finalizer when the function is collected.
pub fn table_function<T>(
    env: &Env,
    name: &str,
    callback: HotCallback,
    table: Rc<T>,
) -> Result<sys::napi_value> {
    let raw_env = env.raw();
    let data = Rc::into_raw(table) as *mut c_void;
    let mut function = ptr::null_mut();
    // SAFETY: `raw_env` is the live env of this call; `name` is valid for
    // `name.len()` bytes; `callback` has the napi_callback signature.
    let mut status = unsafe {
        sys::napi_create_function(
            raw_env,
            name.as_ptr().cast(),
            name.len() as isize,
            Some(callback),
            data,
            &mut function,
        )
    };
    if status == sys::Status::napi_ok {
        // SAFETY: `function` was just created in `raw_env`; `drop_rc::<T>`
        // receives exactly the `data` pointer made by `Rc::into_raw` above.
        status = unsafe {
            sys::napi_add_finalizer(
                raw_env,
                function,
                data,
                Some(drop_rc::<T>),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
    }
    if status != sys::Status::napi_ok {
        // The function (if any) never got the finalizer: take the count back.
        // SAFETY: `data` came from `Rc::into_raw` and no finalizer owns it.
        drop(unsafe { Rc::from_raw(data as *const T) });
        return Err(Error::new(
            Status::GenericFailure,
            format!("cannot create {name}"),
        ));
    }
    Ok(function)
}

/// Finalizer of a [`table_function`]: gives back its count of the data.
unsafe extern "C" fn drop_rc<T>(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the pointer `table_function` made with
    // `Rc::into_raw::<T>`, and a finalizer runs once.
    drop(unsafe { Rc::from_raw(data as *const T) });
}

/// Runs `f` on the value whose handle is the first argument, in the table
/// that is the callback's data, with the second argument as a number when
/// `with_number` (else 0). Throws a TypeError (and returns null) for a bad
/// handle or a non-number.
///
/// # Safety
///
/// `env` and `info` are the arguments of a running napi callback whose
/// function was made by [`table_function`] with a `Table<T>`.
pub unsafe fn call<T>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    with_number: bool,
    f: impl FnOnce(&T, f64) -> std::result::Result<f64, String>,
) -> sys::napi_value {
    let mut argc = 2usize;
    let mut argv = [ptr::null_mut(); 2];
    let mut data = ptr::null_mut();
    let mut key = ptr::null_mut();
    let mut value = 0.0;
    // SAFETY: the caller's env and info; room for two arguments.
    let got = unsafe {
        sys::napi_get_cb_info(
            env,
            info,
            &mut argc,
            argv.as_mut_ptr(),
            ptr::null_mut(),
            &mut data,
        )
    };
    // SAFETY: as above; a missing argument reads as `undefined`, which
    // these calls reject.
    if got != sys::Status::napi_ok
        || unsafe { sys::napi_get_value_external(env, argv[0], &mut key) } != sys::Status::napi_ok
    {
        // SAFETY: the caller's env.
        return unsafe { throw_type_error(env, c"pacer: not a pacer handle") };
    }
    if with_number
        // SAFETY: the caller's env; `argv[1]` is an argument of this call.
        && unsafe { sys::napi_get_value_double(env, argv[1], &mut value) } != sys::Status::napi_ok
    {
        // SAFETY: the caller's env.
        return unsafe { throw_type_error(env, c"pacer: nowMs must be a number") };
    }
    // SAFETY: the function was made by `table_function` with a `Table<T>`,
    // which it keeps alive while it can be called.
    let table = unsafe { &*(data as *const Table<T>) };
    match table.with(key as usize, |target| f(target, value)) {
        // SAFETY: the caller's env.
        Some(Ok(code)) => unsafe { number(env, code) },
        // SAFETY: the caller's env.
        Some(Err(message)) => unsafe { throw_error(env, &message) },
        // SAFETY: the caller's env.
        None => unsafe { throw_type_error(env, c"pacer: not a pacer handle") },
    }
}

/// `value` as a JS number (null, which JS sees as `undefined`, if Node-API
/// fails, which it does only for a broken env).
///
/// # Safety
///
/// `env` is the env of a running napi callback.
unsafe fn number(env: sys::napi_env, value: f64) -> sys::napi_value {
    let mut result = ptr::null_mut();
    // SAFETY: the caller's env.
    unsafe { sys::napi_create_double(env, value, &mut result) };
    result
}

/// Throws a TypeError; the callback then returns null.
///
/// # Safety
///
/// `env` is the env of a running napi callback.
unsafe fn throw_type_error(env: sys::napi_env, message: &std::ffi::CStr) -> sys::napi_value {
    // SAFETY: the caller's env; the message is NUL-terminated.
    unsafe { sys::napi_throw_type_error(env, ptr::null(), message.as_ptr()) };
    ptr::null_mut()
}

/// Throws an Error with `message` and the `code` napi-rs gives its own
/// failures (`GenericFailure`), as the class methods would; the callback
/// then returns null.
///
/// # Safety
///
/// `env` is the env of a running napi callback.
unsafe fn throw_error(env: sys::napi_env, message: &str) -> sys::napi_value {
    let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // SAFETY: the caller's env; both strings are NUL-terminated.
    unsafe { sys::napi_throw_error(env, c"GenericFailure".as_ptr(), message.as_ptr()) };
    ptr::null_mut()
}

/// The crossing floor, for the benchmarks (bench/node): a Node-API call made
/// the way the hot calls are, that reads nothing and returns `undefined`.
pub unsafe extern "C" fn noop(
    _env: sys::napi_env,
    _info: sys::napi_callback_info,
) -> sys::napi_value {
    ptr::null_mut()
}
