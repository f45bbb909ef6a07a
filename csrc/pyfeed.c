/* agent.stream._feed: ha_stream_feed_packed() called from Python without
 * cffi's generic wrapper, for the one call a network read makes.
 *
 * Why by hand: with one line per read (a stream that keeps up with the
 * model), cffi's call of three converted arguments and the str made from
 * its ffi.buffer cost more than the whole parse. A METH_FASTCALL method
 * that takes the read and returns the delta's text as a str made the Ollama
 * decoder 1.5x faster per line (bench/ollama_bench.py). Everything else
 * stays on cffi: the stream, its areas and the records are cffi's, and the
 * function called is the cffi module's own (its address is given to Feed),
 * so the core is built once.
 *
 * Limited API (abi3), like the cffi module. Feed holds a reference to the
 * objects that own the stream and its text area, so the raw addresses it
 * keeps live as long as it does. It keeps the GIL through the call, as the
 * cffi module's calls do (agent/stream/_build.py). The tables below are
 * CPython's definitions of the module and its type, its only statics; no
 * state lives in them. Built with the core's warnings but for
 * -Wpedantic: CPython's type and module slots are void pointers that hold
 * functions, which ISO C does not define and POSIX does. */

#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030B0000
#include <Python.h>

#include "extract.h"

typedef int64_t (*feed_fn)(ha_stream *st, const uint8_t *in, size_t len);

/* the address given is of a function of exactly this type: checked here,
 * where _Generic does not evaluate (so does not link) the function named */
_Static_assert(_Generic(&ha_stream_feed_packed, feed_fn: 1, default: 0),
               "ha_stream_feed_packed is not a feed_fn");

#define PACKED_CODE_MASK ((INT64_C(1) << HA_PACKED_TEXT_SHIFT) - 1)

typedef struct {
    PyObject_HEAD
    feed_fn feed;
    ha_stream *st;
    const char *text;   /* the stream's text area */
    PyObject *owner;    /* keeps st and text alive */
} Feed;

static PyObject *feed_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    unsigned long long fn, st, text;
    PyObject *owner;
    if (kwargs != NULL && PyDict_Size(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "Feed() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "KKKO:Feed", &fn, &st, &text, &owner))
        return NULL;
    if (fn == 0 || st == 0 || text == 0) {
        PyErr_SetString(PyExc_ValueError, "Feed() needs three non-null addresses");
        return NULL;
    }
    Feed *self = (Feed *)PyType_GenericAlloc(type, 0);
    if (self == NULL)
        return NULL;
    self->feed = (feed_fn)(uintptr_t)fn;
    self->st = (ha_stream *)(uintptr_t)st;
    self->text = (const char *)(uintptr_t)text;
    Py_INCREF(owner);
    self->owner = owner;
    return (PyObject *)self;
}

static void feed_dealloc(PyObject *obj)
{
    PyTypeObject *type = Py_TYPE(obj);
    Py_DECREF(((Feed *)obj)->owner);
    PyObject_Free(obj);
    Py_DECREF(type);  /* an instance of a heap type holds its type */
}

/* feed(data: bytes, code: int) -> str | int
 * One ha_stream_feed_packed() of the read. When the call packed its return
 * (one plain delta, all the call's text) and that delta's kind and index
 * are `code` (decoder.packed_code), the delta's text as a str; otherwise
 * the call's return as is. Either way the records are written. */
static PyObject *feed_feed(PyObject *obj, PyObject *const *args, Py_ssize_t nargs)
{
    Feed *self = (Feed *)obj;
    char *data;
    Py_ssize_t len;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "feed() takes the read and a packed code");
        return NULL;
    }
    long long code = PyLong_AsLongLong(args[1]);
    if (code == -1 && PyErr_Occurred())
        return NULL;
    /* a TypeError for anything but bytes */
    if (PyBytes_AsStringAndSize(args[0], &data, &len) < 0)
        return NULL;
    int64_t n = self->feed(self->st, (const uint8_t *)data, (size_t)len);
    if (n < 0 && (~n & PACKED_CODE_MASK) == code)
        /* the core checked the text's UTF-8: strict, as str.decode() */
        return PyUnicode_DecodeUTF8(self->text, (Py_ssize_t)(~n >> HA_PACKED_TEXT_SHIFT), NULL);
    return PyLong_FromLongLong(n);
}

static PyMethodDef feed_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))feed_feed, METH_FASTCALL,
     "feed(data, code): the read's delta text as a str if it packed as code, "
     "else ha_stream_feed_packed's return"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot feed_slots[] = {
    {Py_tp_new, (void *)feed_new},
    {Py_tp_dealloc, (void *)feed_dealloc},
    {Py_tp_methods, feed_methods},
    {Py_tp_doc, (void *)"Feed(feed_address, stream_address, text_address, owner)"},
    {0, NULL},
};

static PyType_Spec feed_spec = {
    .name = "agent.stream._feed.Feed",
    .basicsize = sizeof(Feed),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = feed_slots,
};

static int feed_exec(PyObject *module)
{
    PyObject *type = PyType_FromModuleAndSpec(module, &feed_spec, NULL);
    if (type == NULL)
        return -1;
    int rc = PyModule_AddObjectRef(module, "Feed", type);
    Py_DECREF(type);
    return rc;
}

static PyModuleDef_Slot feed_module_slots[] = {
    {Py_mod_exec, (void *)feed_exec},
    {0, NULL},
};

static struct PyModuleDef feed_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "agent.stream._feed",
    .m_doc = "ha_stream_feed_packed() for the one call a network read makes",
    .m_size = 0,
    .m_slots = feed_module_slots,
};

PyMODINIT_FUNC PyInit__feed(void)
{
    return PyModuleDef_Init(&feed_module);
}
