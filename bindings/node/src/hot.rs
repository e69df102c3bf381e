//! The hot calls, written against Node-API directly.
//!
//! A napi-rs class method finds its Rust struct with `napi_unwrap` (a
//! private-property lookup on `this`) and converts every argument and result
//! through checked helpers; together that costs several times the decision
//! itself. The hot calls are instead plain module functions,
//! `reserveHot(handle)`, whose one argument is a pacer's handle: an External
//! holding the pacer's key in a [`Table`]. One `napi_get_cb_info` yields the
//! argument and the table (the function's own data), and
//! `napi_get_value_external` the key. Being one function for every pacer,
//! each call site in `index.js` stays monomorphic.
//!
//! The clock goes in and the decision's code comes out through the env's
//! [`Exchange`], two numbers JavaScript sees as a `Float64Array`: the caller
//! writes `exchange[0]`, calls, and reads `exchange[1]`. Passing them as an
//! argument and a result instead costs a `napi_get_value_double`, a
//! `napi_create_double` and, for a code past 2^30 (every admission after
//! the 8192nd), a heap number: together about 15 of the 40 ns the call
//! took that way (measured while developing; the Node binding's notes in
//! docs/benchmarks.md).
//!
//! The External holds a key, never a pointer: any External passed in
//! (another addon's, say) is looked up and, unknown, refused with a
//! TypeError, so nothing is ever dereferenced on the caller's word. The
//! low bit of the key names the table, so a shared pacer's handle is
//! unknown to `reserveHot` and the other way round.

use std::cell::RefCell;
use std::ffi::{c_void, CString};
use std::ptr::{self, NonNull};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use napi::bindgen_prelude::*;
use napi::sys;

/// The memory behind an [`Exchange`]: the two cells JavaScript sees
/// (`clock`, then `answer`: a `Float64Array` of length 2 over the first 16
/// bytes) and how many owners it has left.
#[repr(C)]
struct Cells {
    clock: AtomicU64,
    answer: AtomicU64,
    owners: AtomicUsize,
}

/// Bytes of [`Cells`] JavaScript sees: `clock` and `answer`.
const EXCHANGED_BYTES: usize = 16;

/// One env's exchange cells: the clock a hot call reads and the code it
/// writes. The addon owns the memory, and so does every `ArrayBuffer` that
/// holds it: it is freed when the env is torn down and the buffer
/// collected, whichever comes last. So no script can free it under the
/// addon, not even by transferring the buffer to another thread; and the
/// addon reads and writes the cells as atomics, so a script writing them
/// from such a thread makes wrong numbers, never undefined behaviour.
#[derive(Clone, Copy)]
pub struct Exchange {
    cells: NonNull<Cells>,
}

impl Exchange {
    /// New cells for `env`, and the `Float64Array` over them that the env's
    /// scripts use. The env's count is given back by a cleanup hook when the
    /// env is torn down, the buffer's by its finalizer.
    pub fn new(env: &Env) -> Result<(Exchange, sys::napi_value)> {
        let raw_env = env.raw();
        let cells = NonNull::from(Box::leak(Box::new(Cells {
            clock: AtomicU64::new(0),
            answer: AtomicU64::new(0),
            owners: AtomicUsize::new(2),
        })));
        let failed = |owners: usize| {
            for _ in 0..owners {
                // SAFETY: each call gives back a count this function holds.
                unsafe { release_cells(cells.as_ptr()) };
            }
            Error::new(
                Status::GenericFailure,
                "pacer: cannot create the hot calls' exchange",
            )
        };
        let mut buffer = ptr::null_mut();
        // SAFETY: `raw_env` is the live env of this call; the buffer's data
        // is the cells' first 16 bytes, which live until `release_cells`
        // gives back the count the finalizer receives.
        let status = unsafe {
            sys::napi_create_external_arraybuffer(
                raw_env,
                cells.as_ptr().cast(),
                EXCHANGED_BYTES,
                Some(finalize_cells),
                ptr::null_mut(),
                &mut buffer,
            )
        };
        if status != sys::Status::napi_ok {
            return Err(failed(2));
        }
        let mut array = ptr::null_mut();
        // SAFETY: `buffer` is a live ArrayBuffer of this env, 16 bytes long
        // and 8-aligned (the cells' alignment).
        let status = unsafe {
            sys::napi_create_typedarray(
                raw_env,
                sys::TypedarrayType::float64_array,
                2,
                buffer,
                0,
                &mut array,
            )
        };
        if status != sys::Status::napi_ok {
            return Err(failed(1));
        }
        // SAFETY: as above; the hook receives the cells pointer once.
        let status = unsafe {
            sys::napi_add_env_cleanup_hook(raw_env, Some(cleanup_cells), cells.as_ptr().cast())
        };
        if status != sys::Status::napi_ok {
            return Err(failed(1));
        }
        Ok((Exchange { cells }, array))
    }

    fn cells(&self) -> &Cells {
        // SAFETY: the env's count keeps the cells alive until the env's
        // cleanup hook runs, after which no hot call can.
        unsafe { self.cells.as_ref() }
    }

    /// The clock the caller wrote, ms.
    fn clock(&self) -> f64 {
        f64::from_bits(self.cells().clock.load(Ordering::Relaxed))
    }

    /// Hands `code` back to the caller.
    fn answer(&self, code: f64) {
        self.cells().answer.store(code.to_bits(), Ordering::Relaxed);
    }
}

/// Gives back one count of the cells; the last frees them.
///
/// # Safety
///
/// `cells` came from [`Exchange::new`] and the caller holds a count.
unsafe fn release_cells(cells: *mut Cells) {
    // SAFETY: the caller's count keeps the cells alive until this decrement.
    if unsafe { &*cells }.owners.fetch_sub(1, Ordering::AcqRel) == 1 {
        // SAFETY: no count is left, so nothing else reaches the cells; they
        // came from `Box::leak`.
        drop(unsafe { Box::from_raw(cells) });
    }
}

/// Finalizer of the exchange's ArrayBuffer: gives back the buffer's count.
unsafe extern "C" fn finalize_cells(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the cells pointer, and the buffer holds a count.
    unsafe { release_cells(data.cast()) };
}

/// The env's cleanup hook: gives back the env's count.
unsafe extern "C" fn cleanup_cells(data: *mut c_void) {
    // SAFETY: `data` is the cells pointer, and the env holds a count.
    unsafe { release_cells(data.cast()) };
}

/// The pacers one env's hot calls can reach, by key: `2·slot + tag`, the
/// tag (0 or 1) telling the tables apart. Slot 0 stays empty, so no key is
/// a null External. Lives on the env's JS thread only, with the env's
/// [`Exchange`].
pub struct Table<T> {
    tag: usize,
    slots: RefCell<Vec<Option<Rc<T>>>>,
    free: RefCell<Vec<usize>>,
    exchange: Exchange,
}

impl<T> Table<T> {
    pub fn new(tag: usize, exchange: Exchange) -> Self {
        debug_assert!(tag < 2);
        Table {
            tag,
            slots: RefCell::new(vec![None]),
            free: RefCell::new(Vec::new()),
            exchange,
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

/// Runs `f` on the value whose handle is the one argument, in the table
/// that is the callback's data, with the exchange's clock when `with_clock`
/// (else 0), and writes its code to the exchange; returns `undefined`.
/// Throws a TypeError (and writes nothing) for a bad handle, or for a clock
/// that is NaN, negative or infinite; a finite clock is taken whole
/// (fraction dropped, saturating at `u64::MAX`, as the core's clock is any
/// `u64`). An error from `f` is thrown as an Error.
///
/// # Safety
///
/// `env` and `info` are the arguments of a running napi callback whose
/// function was made by [`table_function`] with a `Table<T>`.
pub unsafe fn call<T>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    with_clock: bool,
    f: impl FnOnce(&T, f64) -> std::result::Result<f64, String>,
) -> sys::napi_value {
    let mut argc = 1usize;
    let mut handle = ptr::null_mut();
    let mut data = ptr::null_mut();
    let mut key = ptr::null_mut();
    // SAFETY: the caller's env and info; room for one argument.
    let got = unsafe {
        sys::napi_get_cb_info(
            env,
            info,
            &mut argc,
            &mut handle,
            ptr::null_mut(),
            &mut data,
        )
    };
    // SAFETY: as above; a missing argument reads as `undefined`, which
    // these calls reject.
    if got != sys::Status::napi_ok
        || unsafe { sys::napi_get_value_external(env, handle, &mut key) } != sys::Status::napi_ok
    {
        // SAFETY: the caller's env.
        return unsafe { throw_type_error(env, c"pacer: not a pacer handle") };
    }
    // SAFETY: the function was made by `table_function` with a `Table<T>`,
    // which it keeps alive while it can be called.
    let table = unsafe { &*(data as *const Table<T>) };
    let now_ms = if with_clock {
        let now_ms = table.exchange.clock();
        if now_ms.is_nan() || now_ms < 0.0 || now_ms == f64::INFINITY {
            // SAFETY: the caller's env.
            return unsafe {
                throw_type_error(
                    env,
                    c"pacer: nowMs must be a finite number of ms, 0 or more",
                )
            };
        }
        now_ms
    } else {
        0.0
    };
    match table.with(key as usize, |target| f(target, now_ms)) {
        Some(Ok(code)) => {
            table.exchange.answer(code);
            ptr::null_mut()
        }
        // SAFETY: the caller's env.
        Some(Err(message)) => unsafe { throw_error(env, &message) },
        // SAFETY: the caller's env.
        None => unsafe { throw_type_error(env, c"pacer: not a pacer handle") },
    }
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
