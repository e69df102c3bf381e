/*
 * pacer._fast: the hot call of the Python binding, in C.
 *
 * `Pacer.reserve(now_ms)` is the call on the path of every new connection.
 * Through cffi alone it costs a Python method, a cffi out-struct, the cffi
 * crossing and three Python objects built by dataclass constructors; here
 * it is one C method that checks the clock, calls the core's
 * pacer_reserve and fills the binding's own result objects.
 *
 * `Core` is the C base type of `pacer.Pacer`: its `reserve` is
 * `Pacer.reserve`. `Ticket` is `pacer.Ticket` itself (a C type, so that
 * the one object every admission carries costs no Python ints and frees
 * quickly). The decisions are instances of the Python frozen dataclasses
 * `Admitted` and `Refused`, so equality, repr, hashing, immutability and
 * the dataclass functions are exactly theirs: this module allocates them
 * and stores each field straight into its slot, as their constructors
 * would, without running the constructors. `setup` is handed the classes
 * once and checks that every field is a plain object slot of the class
 * before anything is written.
 *
 * This module links nothing: `_bind` is given the address of the pacer's
 * storage and of pacer_reserve in the cffi module (`pacer._pacer_cffi`,
 * which links libpacer.a), so there is one copy of the library in the
 * process. Only pacer.h's types and constants are taken from the header.
 *
 * A pacer that is not bound (a shared pacer, whose calls go through its
 * handle) answers `reserve` with its Python method `_reserve_calls`.
 *
 * The GIL is kept across pacer_reserve: the call is lock-free and bounded
 * (no waiting, no system call), and shorter than releasing and taking the
 * GIL back; other threads' reservations are serialised by the GIL only for
 * that long.
 *
 * The module is built against the stable ABI of CPython 3.10, the lowest
 * version the package supports (Py_LIMITED_API below; setup.py names the
 * file _fast.abi3.so and the wheel is tagged cp310-abi3): one build serves
 * 3.10 and every later CPython. So nothing here reads a PyTypeObject's
 * fields (the type's slots come from PyType_GetSlot, its sizes from its
 * __basicsize__/__itemsize__/__dictoffset__), and the offsets of the
 * decision classes' slots are found by `setup` once, by writing a marker
 * into each slot of a probe instance through the slot's own descriptor
 * (object.__setattr__) and finding that marker in the instance's memory.
 */

#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030A0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "pacer.h"

typedef pacer_status (*reserve_fn)(const struct pacer *, uint64_t, struct pacer_decision *);

/* ------------------------------------------------------------------ setup */

/* Where a field of a slots class lives in its instances. */
typedef struct {
    const char *name;
    Py_ssize_t offset;
} slot;

/* The classes and callables `setup` was given (strong references held for
 * the life of the process), and their slots. */
static PyTypeObject *admitted_type;
static PyTypeObject *refused_type;
static allocfunc admitted_alloc; /* their tp_alloc, read once by setup */
static allocfunc refused_alloc;
static PyTypeObject *ticket_type; /* the Ticket type below, made at import */
static slot admitted_slots[] = {{"wait_ms", 0}, {"path", 0}, {"clock_regressed", 0}, {"ticket", 0}};
static slot refused_slots[] = {{"required_wait_ms", 0}, {"retry_after_s", 0}, {"clock_regressed", 0}};
enum { A_WAIT, A_PATH, A_REGRESSED, A_TICKET };
enum { R_REQUIRED, R_RETRY_AFTER, R_REGRESSED };

/* AdmitPath members by PACER_ADMIT_PATH_* value. */
#define PATH_COUNT 8
static PyObject *paths[PATH_COUNT];

static PyObject *reading_ms;  /* _check.reading_ms(reading): whole ms, or TypeError/ValueError */
static PyObject *pacer_error; /* PacerError(function, status) */
static PyObject *check_u64;   /* _check.u64(field, value): the int, or TypeError/ValueError */
static PyObject *str_now_ms;
static PyObject *str_reserve_calls;
static PyObject *str_pacer_reserve;

#define SLOT(object, s) (*(PyObject **)((char *)(object) + (s).offset))

/* An int attribute of `type` (__basicsize__, ...): -1 with an error set
 * when it cannot be read. */
static Py_ssize_t
type_number(PyTypeObject *type, const char *name)
{
    PyObject *value = PyObject_GetAttrString((PyObject *)type, name);
    if (value == NULL) {
        return -1;
    }
    Py_ssize_t number = PyLong_AsSsize_t(value);
    Py_DECREF(value);
    return number;
}

/* Whether `descr`, found in the class dict of `type`, is a member
 * descriptor (a __slots__ entry) of `type` itself. -1: an error. */
static int
is_own_member(PyObject *descr, PyTypeObject *type)
{
    PyObject *types = PyImport_ImportModule("types");
    PyObject *member_type = types == NULL ? NULL : PyObject_GetAttrString(types, "MemberDescriptorType");
    Py_XDECREF(types);
    if (member_type == NULL) {
        return -1;
    }
    int is_member = (PyObject *)Py_TYPE(descr) == member_type;
    Py_DECREF(member_type);
    if (!is_member) {
        return 0;
    }
    PyObject *owner = PyObject_GetAttrString(descr, "__objclass__");
    if (owner == NULL) {
        return -1;
    }
    int own = owner == (PyObject *)type;
    Py_DECREF(owner);
    return own;
}

/* Finds each of `slots` in `type` (a class of this package): a member
 * descriptor of the class itself, whose offset is where a marker written
 * through it (object.__setattr__ on a fresh instance) shows up, once, in
 * the instance's memory. The instances must be fixed-size objects with no
 * dict, so a slot is all there is to an instance's field. */
static int
find_slots(PyTypeObject *type, slot *slots, size_t count, allocfunc *alloc_out)
{
    Py_ssize_t basicsize = type_number(type, "__basicsize__");
    Py_ssize_t itemsize = basicsize < 0 ? -1 : type_number(type, "__itemsize__");
    Py_ssize_t dictoffset = itemsize < 0 ? -1 : type_number(type, "__dictoffset__");
    if (dictoffset < 0 && PyErr_Occurred()) {
        return -1;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    if (itemsize != 0 || dictoffset != 0 || !(PyType_GetFlags(type) & Py_TPFLAGS_HEAPTYPE) || alloc == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "pacer._fast: %R must be a slots class without __dict__", (PyObject *)type);
        return -1;
    }
    PyObject *probe = alloc(type, 0);
    if (probe == NULL) {
        return -1;
    }
    PyObject *markers[8] = {NULL};
    int result = -1;
    for (size_t i = 0; i < count && i < 8; i++) {
        PyObject *name = PyUnicode_FromString(slots[i].name);
        PyObject *descr = name == NULL ? NULL : PyObject_GetAttr((PyObject *)type, name);
        int own = descr == NULL ? -1 : is_own_member(descr, type);
        Py_XDECREF(descr);
        if (own <= 0) {
            Py_XDECREF(name);
            if (own == 0 || PyErr_ExceptionMatches(PyExc_AttributeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "pacer._fast: %R.%s must be a slot of the class", (PyObject *)type,
                             slots[i].name);
            }
            goto done;
        }
        markers[i] = PyList_New(0); /* a new object: its address is nowhere else */
        int set = markers[i] == NULL ? -1 : PyObject_GenericSetAttr(probe, name, markers[i]);
        Py_DECREF(name);
        if (set < 0) {
            goto done;
        }
        Py_ssize_t found = -1;
        for (Py_ssize_t offset = (Py_ssize_t)sizeof(PyObject);
             offset + (Py_ssize_t)sizeof(PyObject *) <= basicsize; offset += (Py_ssize_t)sizeof(PyObject *)) {
            if (*(PyObject **)((char *)probe + offset) == markers[i]) {
                if (found >= 0) {
                    found = -1;
                    break;
                }
                found = offset;
            }
        }
        if (found < 0) {
            PyErr_Format(PyExc_TypeError, "pacer._fast: %R.%s must be a slot of the class", (PyObject *)type,
                         slots[i].name);
            goto done;
        }
        slots[i].offset = found;
    }
    *alloc_out = alloc;
    result = 0;
done:
    Py_DECREF(probe); /* its dealloc drops the markers it holds */
    for (size_t i = 0; i < 8; i++) {
        Py_XDECREF(markers[i]);
    }
    return result;
}

PyDoc_STRVAR(setup_doc,
"setup(admitted, refused, paths, pacer_error, check_u64, reading_ms, /)\n--\n\n"
"Called once by pacer._pacer: the decision classes, the AdmitPath members\n"
"by their C value (a dict), PacerError, the u64 argument check and the\n"
"clock reading conversion.");

static PyObject *
fast_setup(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "pacer._fast.setup takes 6 arguments");
        return NULL;
    }
    if (admitted_type != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "pacer._fast.setup was called already");
        return NULL;
    }
    for (int i = 0; i < 2; i++) {
        if (!PyType_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "pacer._fast.setup: the first two arguments must be classes");
            return NULL;
        }
    }
    if (!PyDict_Check(args[2]) || !PyCallable_Check(args[3]) || !PyCallable_Check(args[4]) ||
        !PyCallable_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "pacer._fast.setup: paths must be a dict, the others callables");
        return NULL;
    }
    if (find_slots((PyTypeObject *)args[0], admitted_slots, 4, &admitted_alloc) < 0 ||
        find_slots((PyTypeObject *)args[1], refused_slots, 3, &refused_alloc) < 0) {
        return NULL;
    }
    PyObject *found[PATH_COUNT] = {NULL};
    PyObject *key, *value;
    Py_ssize_t position = 0;
    while (PyDict_Next(args[2], &position, &key, &value)) {
        long number = PyLong_Check(key) ? PyLong_AsLong(key) : -1;
        if (number < 0 || number >= PATH_COUNT) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_ValueError, "pacer._fast.setup: a path value is out of range");
            }
            return NULL;
        }
        found[number] = value;
    }
    for (int i = 0; i < PATH_COUNT; i++) {
        paths[i] = Py_XNewRef(found[i]);
    }
    admitted_type = (PyTypeObject *)Py_NewRef(args[0]);
    refused_type = (PyTypeObject *)Py_NewRef(args[1]);
    pacer_error = Py_NewRef(args[3]);
    check_u64 = Py_NewRef(args[4]);
    reading_ms = Py_NewRef(args[5]);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(clock_ms_doc,
"clock_ms(clock, /)\n--\n\n"
"Reads ``clock`` (seconds, like time.monotonic) as whole milliseconds:\n"
"_check.clock_ms in C for a non-negative int or finite float reading\n"
"(a float is rounded to the microsecond, half to even as round() does,\n"
"then floored to the millisecond); any other reading goes to\n"
"_check.reading_ms, which converts it or raises.");

static PyObject *
fast_clock_ms(PyObject *module, PyObject *clock)
{
    (void)module;
    if (reading_ms == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "pacer._fast.setup was not called");
        return NULL;
    }
    PyObject *reading = PyObject_CallNoArgs(clock);
    if (reading == NULL) {
        return NULL;
    }
    PyObject *ms = NULL;
    if (PyFloat_CheckExact(reading)) {
        /* value * 1_000_000 as Python computes it (1e6 is exact), rounded as
         * round() does; below 2**63 microseconds the result is exact. */
        double micros = PyFloat_AsDouble(reading) * 1e6;
        if (micros >= 0.0 && micros < 9.2e18) {
            ms = PyLong_FromLongLong((long long)nearbyint(micros) / 1000);
        }
    } else if (PyLong_CheckExact(reading)) {
        int overflow;
        long long seconds = PyLong_AsLongLongAndOverflow(reading, &overflow);
        if (overflow == 0 && seconds >= 0 && seconds <= LLONG_MAX / 1000) {
            ms = PyLong_FromLongLong(seconds * 1000);
        } else if (seconds == -1 && PyErr_Occurred()) {
            PyErr_Clear();
        }
    }
    if (ms == NULL && !PyErr_Occurred()) {
        ms = PyObject_CallFunctionObjArgs(reading_ms, reading, NULL);
    }
    Py_DECREF(reading);
    return ms;
}

PyDoc_STRVAR(noop_doc,
"noop()\n--\n\n"
"Does nothing: the cost of calling into this module (benchmarks).");

static PyObject *
fast_noop(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ Ticket */

/* pacer.Ticket. The Python code of the package reads `_pacer`, `_seq`,
 * `_debit_units`, `_owner` and flips `_spent` under the pacer's release
 * lock. `owner` is the C ticket's owner tag (ABI 2): the issuing pacer's,
 * passed back whenever a `struct pacer_ticket` is rebuilt from this object,
 * or the library refuses it (PACER_STATUS_FOREIGN_TICKET). */
typedef struct {
    PyObject_HEAD
    PyObject *pacer;
    unsigned int seq;
    unsigned int debit_units;
    unsigned int owner;
    char spent;
} Ticket;

/* Freed tickets kept for reuse (an admission makes one and its caller
 * usually drops it soon): the GIL guards the list. What is left in it at
 * exit is not freed. */
#define TICKET_FREELIST 64
static Ticket *ticket_freelist[TICKET_FREELIST];
static int ticket_free_count;

static Ticket *
ticket_new_from(PyTypeObject *type, PyObject *pacer, unsigned int seq, unsigned int debit_units,
                unsigned int owner)
{
    Ticket *ticket;
    if (type == ticket_type && ticket_free_count > 0) {
        ticket = ticket_freelist[--ticket_free_count];
        PyObject_Init((PyObject *)ticket, type);
    } else {
        ticket = PyObject_GC_New(Ticket, type);
        if (ticket == NULL) {
            return NULL;
        }
    }
    ticket->pacer = Py_NewRef(pacer);
    ticket->seq = seq;
    ticket->debit_units = debit_units;
    ticket->owner = owner;
    ticket->spent = 0;
    PyObject_GC_Track(ticket);
    return ticket;
}

static int
u32_of(PyObject *value, const char *field, unsigned int *out)
{
    PyObject *number = PyNumber_Index(value);
    if (number == NULL) {
        return -1;
    }
    unsigned long long big = PyLong_AsUnsignedLongLong(number);
    Py_DECREF(number);
    if ((big == (unsigned long long)-1 && PyErr_Occurred()) || big > UINT32_MAX) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "pacer: %s must be between 0 and %u", field, (unsigned int)UINT32_MAX);
        return -1;
    }
    *out = (unsigned int)big;
    return 0;
}

static PyObject *
ticket_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"pacer", "seq", "debit_units", "owner", NULL};
    PyObject *pacer, *seq, *debit, *owner;
    unsigned int seq_value, debit_value, owner_value;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO:Ticket", names, &pacer, &seq, &debit, &owner) ||
        u32_of(seq, "seq", &seq_value) < 0 || u32_of(debit, "debit_units", &debit_value) < 0 ||
        u32_of(owner, "owner", &owner_value) < 0) {
        return NULL;
    }
    return (PyObject *)ticket_new_from(type, pacer, seq_value, debit_value, owner_value);
}

/* The GC support of this module's two types (Ticket, Core): each instance
 * holds one object (a ticket its pacer, a pacer its storage's owner) and,
 * as an instance of a heap type, its type. */
static int
traverse_held(PyObject *self, PyObject *held, visitproc visit, void *arg)
{
    Py_VISIT(held);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

/* Untracks `self`, clears it and frees it with `release` (which takes the
 * object and its type), then drops the type's reference. */
static void
dealloc_with(PyObject *self, inquiry clear, void (*release)(PyObject *, PyTypeObject *))
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    clear(self);
    release(self, type);
    Py_DECREF(type);
}

static int
ticket_traverse(Ticket *self, visitproc visit, void *arg)
{
    return traverse_held((PyObject *)self, self->pacer, visit, arg);
}

static int
ticket_clear(Ticket *self)
{
    Py_CLEAR(self->pacer);
    return 0;
}

/* A plain Ticket goes back to the free list while there is room. */
static void
ticket_release(PyObject *self, PyTypeObject *type)
{
    if (type == ticket_type && ticket_free_count < TICKET_FREELIST) {
        ticket_freelist[ticket_free_count++] = (Ticket *)self;
    } else {
        PyObject_GC_Del(self);
    }
}

static void
ticket_dealloc(Ticket *self)
{
    dealloc_with((PyObject *)self, (inquiry)ticket_clear, ticket_release);
}

static PyObject *
ticket_debit_units(Ticket *self, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLong(self->debit_units);
}

static PyObject *
ticket_spent(Ticket *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->spent);
}

static PyObject *
ticket_repr(Ticket *self)
{
    return PyUnicode_FromFormat("<pacer.Ticket debit_units=%u spent=%s>", self->debit_units,
                                self->spent ? "True" : "False");
}

static PyGetSetDef ticket_getset[] = {
    {"debit_units", (getter)ticket_debit_units, NULL, "The debit this ticket refunds, in 1/60000 of a connection.",
     NULL},
    {"spent", (getter)ticket_spent, NULL, "Whether it was released already.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef ticket_members[] = {
    {"_pacer", T_OBJECT_EX, offsetof(Ticket, pacer), READONLY, NULL},
    {"_seq", T_UINT, offsetof(Ticket, seq), READONLY, NULL},
    {"_debit_units", T_UINT, offsetof(Ticket, debit_units), READONLY, NULL},
    {"_owner", T_UINT, offsetof(Ticket, owner), READONLY, NULL},
    {"_spent", T_BOOL, offsetof(Ticket, spent), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot ticket_type_slots[] = {
    {Py_tp_doc, "The right to refund one admission's debit; released at most once, by\n"
                "the pacer that issued it. Made by ``reserve``, not by hand."},
    {Py_tp_new, ticket_tp_new},
    {Py_tp_dealloc, ticket_dealloc},
    {Py_tp_traverse, ticket_traverse},
    {Py_tp_clear, ticket_clear},
    {Py_tp_repr, ticket_repr},
    {Py_tp_getset, ticket_getset},
    {Py_tp_members, ticket_members},
    {0, NULL},
};

static PyType_Spec ticket_spec = {
    .name = "pacer.Ticket",
    .basicsize = sizeof(Ticket),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = ticket_type_slots,
};

/* ------------------------------------------------------------------ Core */

typedef struct {
    PyObject_HEAD
    /* NULL until bound: reserve then goes through _reserve_calls. */
    const struct pacer *storage;
    reserve_fn reserve;
    /* What keeps the storage alive (the cffi buffer). */
    PyObject *owner;
} Core;

static int
core_traverse(Core *self, visitproc visit, void *arg)
{
    return traverse_held((PyObject *)self, self->owner, visit, arg);
}

static int
core_clear(Core *self)
{
    self->storage = NULL;
    self->reserve = NULL;
    Py_CLEAR(self->owner);
    return 0;
}

static void
core_release(PyObject *self, PyTypeObject *type)
{
    freefunc free_self = (freefunc)PyType_GetSlot(type, Py_tp_free);
    free_self(self);
}

static void
core_dealloc(Core *self)
{
    dealloc_with((PyObject *)self, (inquiry)core_clear, core_release);
}

/* A u64 from a Python int given for `now_ms`: the exact-int case here, all
 * else (int subclasses, __index__, the errors) by the package's own check. */
static int
now_of(PyObject *value, uint64_t *now)
{
    if (PyLong_CheckExact(value)) {
        /* The signed conversion reads small ints directly (the unsigned one
         * goes through a byte array); 2**63 and up take the unsigned one. */
        int overflow;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow == 0 && number >= 0) {
            *now = (uint64_t)number;
            return 0;
        }
        if (overflow > 0) {
            unsigned long long big = PyLong_AsUnsignedLongLong(value);
            if (!(big == (unsigned long long)-1 && PyErr_Occurred())) {
                *now = big;
                return 0;
            }
        }
        PyErr_Clear(); /* negative or too big: the check below says so */
    }
    PyObject *checked = PyObject_CallFunctionObjArgs(check_u64, str_now_ms, value, NULL);
    if (checked == NULL) {
        return -1;
    }
    unsigned long long number = PyLong_AsUnsignedLongLong(checked);
    Py_DECREF(checked);
    if (number == (unsigned long long)-1 && PyErr_Occurred()) {
        return -1;
    }
    *now = number;
    return 0;
}

/* A new instance of `type` with its slots set to `values` (references
 * stolen, NULL for a failed conversion: then nothing is made). */
static PyObject *
make(PyTypeObject *type, allocfunc alloc, const slot *slots, PyObject **values, size_t count)
{
    PyObject *made = NULL;
    for (size_t i = 0; i < count; i++) {
        if (values[i] == NULL) {
            goto fail;
        }
    }
    made = alloc(type, 0);
    if (made == NULL) {
        goto fail;
    }
    for (size_t i = 0; i < count; i++) {
        SLOT(made, slots[i]) = values[i];
    }
    return made;
fail:
    for (size_t i = 0; i < count; i++) {
        Py_XDECREF(values[i]);
    }
    return NULL;
}

static PyObject *
reserve_error(pacer_status status)
{
    PyObject *error = PyObject_CallFunction(pacer_error, "OI", str_pacer_reserve, (unsigned int)status);
    if (error != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(error), error);
        Py_DECREF(error);
    }
    return NULL;
}

/* `now_ms` of reserve(now_ms) / reserve(now_ms=...) when not the one
 * positional argument of the fast case: the errors a Python method gives. */
static PyObject *
reserve_argument(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_Size(kwnames);
    PyObject *found = nargs == 1 ? args[0] : NULL;
    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError, "Pacer.reserve() takes 2 positional arguments but %zd were given", nargs + 1);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GetItem(kwnames, i);
        int same = PyUnicode_Compare(name, str_now_ms) == 0;
        if (!same || found != NULL) {
            PyErr_Format(PyExc_TypeError,
                         same ? "Pacer.reserve() got multiple values for argument '%U'"
                              : "Pacer.reserve() got an unexpected keyword argument '%U'",
                         name);
            return NULL;
        }
        found = args[nargs + i];
    }
    if (found == NULL) {
        PyErr_SetString(PyExc_TypeError, "Pacer.reserve() missing 1 required positional argument: 'now_ms'");
    }
    return found;
}

PyDoc_STRVAR(reserve_doc,
"reserve($self, /, now_ms)\n--\n\n"
"Decides at ``now_ms`` (whole ms on the pacer's clock) without\n"
"waiting. The caller waits ``wait_ms`` itself and releases the\n"
"admission if it will not open the connection.");

static PyObject *
core_reserve(Core *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *argument = nargs == 1 && kwnames == NULL ? args[0] : reserve_argument(args, nargs, kwnames);
    if (argument == NULL) {
        return NULL;
    }
    if (self->storage == NULL || admitted_type == NULL) {
        return PyObject_CallMethodObjArgs((PyObject *)self, str_reserve_calls, argument, NULL);
    }
    uint64_t now;
    if (now_of(argument, &now) < 0) {
        return NULL;
    }
    struct pacer_decision out;
    pacer_status status = self->reserve(self->storage, now, &out);
    if (status != PACER_STATUS_OK) {
        return reserve_error(status);
    }
    PyObject *regressed = Py_NewRef(out.clock_regressed ? Py_True : Py_False);
    if (out.kind != PACER_DECISION_KIND_ADMITTED) {
        PyObject *values[3] = {
            [R_REQUIRED] = PyLong_FromUnsignedLongLong(out.required_wait_ms),
            [R_RETRY_AFTER] = PyLong_FromUnsignedLongLong(out.retry_after_s),
            [R_REGRESSED] = regressed,
        };
        return make(refused_type, refused_alloc, refused_slots, values, 3);
    }
    PyObject *path = out.path < PATH_COUNT ? paths[out.path] : NULL;
    if (path == NULL) {
        Py_DECREF(regressed);
        return PyErr_Format(PyExc_RuntimeError, "pacer: pacer_reserve returned an unknown admit path %u",
                            (unsigned int)out.path);
    }
    PyObject *ticket = Py_None;
    if (out.ticket.state == PACER_TICKET_STATE_LIVE) {
        ticket = (PyObject *)ticket_new_from(ticket_type, (PyObject *)self, out.ticket.seq,
                                             out.ticket.debit_units, out.ticket.owner);
        if (ticket == NULL) {
            Py_DECREF(regressed);
            return NULL;
        }
    } else {
        Py_INCREF(ticket);
    }
    PyObject *values[4] = {
        [A_WAIT] = PyLong_FromUnsignedLongLong(out.wait_ms),
        [A_PATH] = Py_NewRef(path),
        [A_REGRESSED] = regressed,
        [A_TICKET] = ticket,
    };
    return make(admitted_type, admitted_alloc, admitted_slots, values, 4);
}

PyDoc_STRVAR(bind_doc,
"_bind($self, owner, storage, reserve, /)\n--\n\n"
"Makes reserve call the C function at address ``reserve`` (pacer_reserve)\n"
"on the ``struct pacer`` at address ``storage``, which ``owner`` keeps\n"
"alive. Once per pacer.");

static PyObject *
core_bind(Core *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_bind takes 3 arguments");
        return NULL;
    }
    if (self->storage != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "pacer: this pacer is bound already");
        return NULL;
    }
    void *storage = PyLong_AsVoidPtr(args[1]);
    if (storage == NULL) {
        return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "_bind: storage is NULL");
    }
    void *function = PyLong_AsVoidPtr(args[2]);
    if (function == NULL) {
        return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "_bind: reserve is NULL");
    }
    if ((uintptr_t)storage % PACER_STORAGE_ALIGN != 0) {
        PyErr_SetString(PyExc_ValueError, "_bind: storage is not aligned");
        return NULL;
    }
    PyObject *old_owner = self->owner;
    self->owner = Py_NewRef(args[0]);
    Py_XDECREF(old_owner);
    self->reserve = (reserve_fn)function;
    self->storage = (const struct pacer *)storage;
    Py_RETURN_NONE;
}

static PyMethodDef core_methods[] = {
    {"reserve", (PyCFunction)(void (*)(void))core_reserve, METH_FASTCALL | METH_KEYWORDS, reserve_doc},
    {"_bind", (PyCFunction)(void (*)(void))core_bind, METH_FASTCALL, bind_doc},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot core_type_slots[] = {
    {Py_tp_doc, "The C part of a pacer: its reserve call."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, core_dealloc},
    {Py_tp_traverse, core_traverse},
    {Py_tp_clear, core_clear},
    {Py_tp_methods, core_methods},
    {0, NULL},
};

static PyType_Spec core_spec = {
    .name = "pacer._fast.Core",
    .basicsize = sizeof(Core),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = core_type_slots,
};

/* ------------------------------------------------------------------ module */

static PyMethodDef fast_methods[] = {
    {"setup", (PyCFunction)(void (*)(void))fast_setup, METH_FASTCALL, setup_doc},
    {"clock_ms", fast_clock_ms, METH_O, clock_ms_doc},
    {"noop", fast_noop, METH_NOARGS, noop_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fast_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pacer._fast",
    .m_doc = "The hot call of the pacer binding (Pacer.reserve), in C.",
    .m_size = -1,
    .m_methods = fast_methods,
};

PyMODINIT_FUNC
PyInit__fast(void)
{
    str_now_ms = PyUnicode_InternFromString("now_ms");
    str_reserve_calls = PyUnicode_InternFromString("_reserve_calls");
    str_pacer_reserve = PyUnicode_InternFromString("pacer_reserve");
    if (str_now_ms == NULL || str_reserve_calls == NULL || str_pacer_reserve == NULL) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&fast_module);
    if (module == NULL) {
        return NULL;
    }
    PyObject *core = PyType_FromSpec(&core_spec);
    int added = core == NULL ? -1 : PyModule_AddObjectRef(module, "Core", core);
    Py_XDECREF(core);
    /* Ticket's own reference is kept in ticket_type for the process's life. */
    PyObject *ticket = added < 0 ? NULL : PyType_FromSpec(&ticket_spec);
    if (ticket == NULL || PyModule_AddObjectRef(module, "Ticket", ticket) < 0) {
        Py_XDECREF(ticket);
        Py_DECREF(module);
        return NULL;
    }
    ticket_type = (PyTypeObject *)ticket;
    return module;
}
