/* _btfgen_lines: lines.py's bare handlers (the texts a recording's exports put in their own
 * lines: chrome's "args", the tree's calls) made in C, where the same handler in Python spent
 * about half of an exported event's time turning the record's integers into digits.
 *
 * A Line is made once per function and kind from what lines.py already computed for its
 * Python handler: the record's byte order, how many bytes the record must hold, where the
 * `failed` mask lies and which of its bits matter, and the line's pieces in order -- literal
 * texts, values read at fixed offsets, and texts the caller passes (a comm, a capture's
 * string, a duration: ("a", k) is the k-th argument past the event's). Called as
 * handler(buf, at, end, *texts) on the event buf[at:end], it returns the line; anything it does
 * not make exactly as the Python handler would (a record too short, a value whose read failed, a
 * line past its buffer, an enum mapping that gives no text) it hands to `general(buf[at:end])`,
 * as the Python handler does -- or, where `general` is None, returns None: the Python handler
 * that called it formats that line itself.
 *
 * Optional: lines.py keeps its Python handlers where this module is absent or of another
 * INTERFACE, and tests/probe/test_line_extension.py compares the two byte for byte.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* lines.py checks this before using the module: bump it when Line's arguments change. */
#define INTERFACE 2

/* A line longer than this goes the general way (a few thousand bytes of text is a prototype
 * of dozens of arguments with long enum names; it is correct there, only slower). */
#define LINE_BYTES 4096

enum piece_kind {
    TEXT,      /* literal UTF-8 */
    SIGNED,    /* %d of a two's complement integer */
    UNSIGNED,  /* %d of an unsigned one */
    HEX,       /* %#x: 0x and lowercase digits, 0 as 0x0 */
    BOOL,      /* one of two texts: any byte set is true */
    ENUM,      /* mapping[value] (an enum's named and unnamed values' texts), signed or not */
    EXTRA,     /* the handler's argument past (buf, at, end) numbered `offset`: a str */
};

typedef struct {
    int kind;
    int size;              /* bytes of a value: 1, 2, 4 or 8 */
    int is_signed;         /* ENUM: read as signed */
    Py_ssize_t offset;     /* of a value, from the event's start */
    const char *text[2];   /* TEXT: text[0]; BOOL: false, true (UTF-8, owned by Line.keep) */
    Py_ssize_t len[2];
    PyObject *mapping;     /* ENUM (a reference in Line.keep) */
} Piece;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int big_endian;
    Py_ssize_t need;       /* the event's bytes every read lies within */
    Py_ssize_t failed_at;  /* the record head's `failed` mask */
    int failed_size;
    uint64_t mask;         /* its bits of this line's values */
    int ascii;             /* every literal is ASCII */
    Py_ssize_t count;
    Py_ssize_t extras;     /* the str arguments a call passes past (buf, at, end) */
    Piece *pieces;
    PyObject *general;
    PyObject *keep;        /* a list of the objects the pieces point into */
} Line;

static inline uint64_t
load(const unsigned char *p, int size, int big_endian)
{
    switch (size) {
    case 1:
        return p[0];
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        return big_endian ? __builtin_bswap16(v) : v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        return big_endian ? __builtin_bswap32(v) : v;
    }
    default: {
        uint64_t v;
        memcpy(&v, p, 8);
        return big_endian ? __builtin_bswap64(v) : v;
    }
    }
}

static inline int64_t
sign_extend(uint64_t v, int size)
{
    int shift = 64 - 8 * size;
    return shift ? (int64_t)(v << shift) >> shift : (int64_t)v;
}

/* Two digits a step: a random 64-bit value has 19 or 20 of them. */
static const char two_digits[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static inline char *
put_decimal(char *out, uint64_t v)
{
    static const uint64_t ten_to[20] = {
        1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL,
        100000000ULL, 1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL,
        10000000000000ULL, 100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL,
        100000000000000000ULL, 1000000000000000000ULL, 10000000000000000000ULL};
    int n = 20;
    char *at;
    while (n > 1 && v < ten_to[n - 1])  /* random values are long: count from the top */
        n--;
    at = out + n;
    while (v >= 100) {
        unsigned i = (unsigned)(v % 100) * 2;
        v /= 100;
        *--at = two_digits[i + 1];
        *--at = two_digits[i];
    }
    if (v >= 10) {
        *--at = two_digits[v * 2 + 1];
        *--at = two_digits[v * 2];
    } else {
        *--at = (char)('0' + v);
    }
    return out + n;
}

static inline char *
put_hex(char *out, uint64_t v)
{
    static const char hexdigits[] = "0123456789abcdef";
    char digits[16];
    int n = 0;
    *out++ = '0';
    *out++ = 'x';
    do {
        digits[n++] = hexdigits[v & 15];
        v >>= 4;
    } while (v);
    while (n)
        *out++ = digits[--n];
    return out;
}

/* The line's text in `out`, its length returned; -1: this event goes the general way;
 * -2: a Python error is set. */
static Py_ssize_t
make(Line *self, const unsigned char *event, PyObject *const *extra, char *out, int *ascii)
{
    char *at = out, *end = out + LINE_BYTES;
    Py_ssize_t i;

    for (i = 0; i < self->count; i++) {
        const Piece *p = &self->pieces[i];
        uint64_t v;
        const char *text;
        Py_ssize_t len;

        if (p->kind == TEXT) {
            text = p->text[0];
            len = p->len[0];
        } else if (p->kind == EXTRA) {
            PyObject *value = extra[p->offset];
            if (!PyUnicode_Check(value))
                return -1;
            text = PyUnicode_AsUTF8AndSize(value, &len);
            if (text == NULL) {
                PyErr_Clear();
                return -1;
            }
            if (!PyUnicode_IS_ASCII(value))
                *ascii = 0;
        } else {
            v = load(event + p->offset, p->size, self->big_endian);
            if (p->kind == BOOL) {
                text = p->text[v != 0];
                len = p->len[v != 0];
            } else if (p->kind == ENUM) {
                PyObject *key, *value;
                key = p->is_signed ? PyLong_FromLongLong(sign_extend(v, p->size))
                                   : PyLong_FromUnsignedLongLong(v);
                if (key == NULL)
                    return -2;
                value = PyObject_GetItem(p->mapping, key);
                Py_DECREF(key);
                if (value == NULL)
                    return -2;
                if (!PyUnicode_Check(value)) {
                    Py_DECREF(value);
                    return -1;
                }
                /* The mapping keeps its texts (lines._Enum): the UTF-8 stays valid while
                 * it is copied below, as the mapping holds a reference. */
                text = PyUnicode_AsUTF8AndSize(value, &len);
                if (text == NULL)
                    PyErr_Clear();  /* not UTF-8 (a lone surrogate): the general way */
                if (text == NULL || end - at < len) {
                    Py_DECREF(value);
                    return -1;
                }
                if (!PyUnicode_IS_ASCII(value))
                    *ascii = 0;
                memcpy(at, text, (size_t)len);
                at += len;
                Py_DECREF(value);
                continue;
            } else {
                if (end - at < 24)
                    return -1;
                if (p->kind == SIGNED) {
                    int64_t s = sign_extend(v, p->size);
                    if (s < 0) {
                        *at++ = '-';
                        v = (uint64_t)0 - (uint64_t)s;
                    } else {
                        v = (uint64_t)s;
                    }
                    at = put_decimal(at, v);
                } else if (p->kind == UNSIGNED) {
                    at = put_decimal(at, v);
                } else {
                    at = put_hex(at, v);
                }
                continue;
            }
        }
        if (end - at < len)
            return -1;
        memcpy(at, text, (size_t)len);
        at += len;
    }
    return at - out;
}

static PyObject *
general_way(Line *self, PyObject *buf, Py_ssize_t at, Py_ssize_t end)
{
    PyObject *raw, *line;
    if (self->general == Py_None)  /* the caller's Python handler makes this line */
        Py_RETURN_NONE;
    raw = PySequence_GetSlice(buf, at, end);
    if (raw == NULL)
        return NULL;
    line = PyObject_CallOneArg(self->general, raw);
    Py_DECREF(raw);
    return line;
}

static PyObject *
line_call(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Line *self = (Line *)callable;
    Py_ssize_t at, end, n;
    Py_buffer view;
    char out[LINE_BYTES];
    int ascii = self->ascii;
    PyObject *line;

    if (PyVectorcall_NARGS(nargsf) != 3 + self->extras
        || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_Format(PyExc_TypeError, "this line handler takes (buf, at, end) and %zd more",
                     self->extras);
        return NULL;
    }
    if (self->general == NULL) {
        PyErr_SetString(PyExc_TypeError, "a Line not made");
        return NULL;
    }
    at = PyLong_AsSsize_t(args[1]);
    if (at == -1 && PyErr_Occurred())
        return NULL;
    end = PyLong_AsSsize_t(args[2]);
    if (end == -1 && PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (at < 0 || end > view.len || end - at < self->need) {
        PyBuffer_Release(&view);
        return general_way(self, args[0], at, end);
    }
    {
        const unsigned char *event = (const unsigned char *)view.buf + at;
        if (load(event + self->failed_at, self->failed_size, self->big_endian) & self->mask) {
            PyBuffer_Release(&view);
            return general_way(self, args[0], at, end);
        }
        n = make(self, event, args + 3, out, &ascii);
    }
    PyBuffer_Release(&view);
    if (n == -2)
        return NULL;
    if (n == -1)
        return general_way(self, args[0], at, end);
    if (!ascii)
        return PyUnicode_DecodeUTF8(out, n, "strict");
    line = PyUnicode_New(n, 127);
    if (line != NULL)
        memcpy(PyUnicode_DATA(line), out, (size_t)n);
    return line;
}

/* A literal's UTF-8, kept alive in self->keep. */
static int
utf8_of(Line *self, PyObject *text, const char **out, Py_ssize_t *len, int *ascii)
{
    PyObject *bytes;
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "a line's text must be str");
        return -1;
    }
    bytes = PyUnicode_AsUTF8String(text);
    if (bytes == NULL)
        return -1;
    if (PyList_Append(self->keep, bytes) < 0) {
        Py_DECREF(bytes);
        return -1;
    }
    Py_DECREF(bytes);  /* the list holds it */
    *out = PyBytes_AS_STRING(bytes);
    *len = PyBytes_GET_SIZE(bytes);
    if (!PyUnicode_IS_ASCII(text))
        *ascii = 0;
    return 0;
}

static int
piece_of(Line *self, PyObject *item, Piece *p)
{
    const char *kind;
    PyObject *extra = NULL;
    int any_ascii = 1;

    memset(p, 0, sizeof(*p));
    if (PyUnicode_Check(item)) {
        p->kind = TEXT;
        if (utf8_of(self, item, &p->text[0], &p->len[0], &any_ascii) < 0)
            return -1;
        if (!any_ascii)
            self->ascii = 0;
        return 0;
    }
    if (!PyTuple_Check(item)) {
        PyErr_SetString(PyExc_TypeError, "a piece is a str or a (kind, offset, size[, extra])");
        return -1;
    }
    if (!PyArg_ParseTuple(item, "sni|O;a value piece is (kind, offset, size[, extra])",
                          &kind, &p->offset, &p->size, &extra))
        return -1;
    if (!strcmp(kind, "a")) {
        /* ("a", k, 0): the k-th argument past (buf, at, end), not read from the event */
        if (p->offset < 0 || p->offset >= 64 || p->size != 0 || extra != NULL) {
            PyErr_SetString(PyExc_ValueError, "an argument piece is (\"a\", 0..63, 0)");
            return -1;
        }
        p->kind = EXTRA;
        if (p->offset >= self->extras)
            self->extras = p->offset + 1;
        return 0;
    }
    if (p->size != 1 && p->size != 2 && p->size != 4 && p->size != 8) {
        PyErr_Format(PyExc_ValueError, "a value of %d bytes", p->size);
        return -1;
    }
    if (p->offset < 0 || p->offset + p->size > self->need) {
        PyErr_Format(PyExc_ValueError, "a value at %zd past the %zd bytes the line needs",
                     p->offset, self->need);
        return -1;
    }
    if (!strcmp(kind, "d")) {
        p->kind = SIGNED;
    } else if (!strcmp(kind, "u")) {
        p->kind = UNSIGNED;
    } else if (!strcmp(kind, "x")) {
        p->kind = HEX;
    } else if (!strcmp(kind, "b")) {
        int i;
        p->kind = BOOL;
        if (extra == NULL || !PyTuple_Check(extra) || PyTuple_GET_SIZE(extra) != 2) {
            PyErr_SetString(PyExc_TypeError, "a bool's extra is (false text, true text)");
            return -1;
        }
        for (i = 0; i < 2; i++) {
            int ascii = 1;
            if (utf8_of(self, PyTuple_GET_ITEM(extra, i), &p->text[i], &p->len[i], &ascii) < 0)
                return -1;
            /* A bool's text is a literal the line may hold: its ASCII-ness counts. */
            if (!ascii)
                self->ascii = 0;
        }
    } else if (!strcmp(kind, "e") || !strcmp(kind, "E")) {
        p->kind = ENUM;
        p->is_signed = kind[0] == 'e';
        if (extra == NULL || !PyMapping_Check(extra)) {
            PyErr_SetString(PyExc_TypeError, "an enum's extra is a mapping of its texts");
            return -1;
        }
        if (PyList_Append(self->keep, extra) < 0)
            return -1;
        p->mapping = extra;
    } else {
        PyErr_Format(PyExc_ValueError, "no value kind %s", kind);
        return -1;
    }
    return 0;
}

static int
line_init(PyObject *op, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"big_endian", "need", "failed_at", "failed_size", "mask", "pieces",
                            "general", NULL};
    Line *self = (Line *)op;
    int big_endian, failed_size;
    Py_ssize_t need, failed_at, i, count;
    PyObject *mask, *pieces, *general, *seq;

    if (self->pieces != NULL) {
        PyErr_SetString(PyExc_TypeError, "a Line is made once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "pnniOOO", names, &big_endian, &need,
                                     &failed_at, &failed_size, &mask, &pieces, &general))
        return -1;
    if (need < 0 || failed_at < 0 || (failed_size != 1 && failed_size != 2 && failed_size != 4
                                      && failed_size != 8) || failed_at + failed_size > need) {
        PyErr_SetString(PyExc_ValueError, "the failed mask lies past the bytes the line needs");
        return -1;
    }
    if (general != Py_None && !PyCallable_Check(general)) {
        PyErr_SetString(PyExc_TypeError, "general must be callable or None");
        return -1;
    }
    self->big_endian = big_endian;
    self->need = need;
    self->failed_at = failed_at;
    self->failed_size = failed_size;
    self->mask = PyLong_AsUnsignedLongLong(mask);
    if (self->mask == (uint64_t)-1 && PyErr_Occurred())
        return -1;
    self->ascii = 1;
    self->keep = PyList_New(0);
    if (self->keep == NULL)
        return -1;
    Py_INCREF(general);
    self->general = general;
    seq = PySequence_Fast(pieces, "pieces must be a sequence");
    if (seq == NULL)
        return -1;
    count = PySequence_Fast_GET_SIZE(seq);
    self->pieces = PyMem_Calloc((size_t)(count ? count : 1), sizeof(Piece));
    if (self->pieces == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < count; i++) {
        if (piece_of(self, PySequence_Fast_GET_ITEM(seq, i), &self->pieces[i]) < 0) {
            Py_DECREF(seq);
            return -1;
        }
        self->count = i + 1;
    }
    Py_DECREF(seq);
    return 0;
}

static PyObject *
line_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    Line *self = (Line *)type->tp_alloc(type, 0);
    if (self != NULL)
        self->vectorcall = line_call;
    return (PyObject *)self;
}

static int
line_traverse(PyObject *op, visitproc visit, void *arg)
{
    Line *self = (Line *)op;
    Py_VISIT(self->general);
    Py_VISIT(self->keep);
    return 0;
}

static int
line_clear(PyObject *op)
{
    Line *self = (Line *)op;
    /* The pieces point into keep: none is read once it is gone (count 0). */
    self->count = 0;
    Py_CLEAR(self->general);
    Py_CLEAR(self->keep);
    return 0;
}

static void
line_dealloc(PyObject *op)
{
    Line *self = (Line *)op;
    PyObject_GC_UnTrack(op);
    line_clear(op);
    PyMem_Free(self->pieces);
    Py_TYPE(op)->tp_free(op);
}

static PyTypeObject LineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_btfgen_lines.Line",
    .tp_doc = PyDoc_STR("Line(big_endian, need, failed_at, failed_size, mask, pieces, general):"
                        " handler(buf, at, end, *texts) -> the line of the event buf[at:end]"),
    .tp_basicsize = sizeof(Line),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Line, vectorcall),
    .tp_new = line_new,
    .tp_init = line_init,
    .tp_call = PyVectorcall_Call,
    .tp_traverse = line_traverse,
    .tp_clear = line_clear,
    .tp_dealloc = line_dealloc,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_btfgen_lines",
    .m_doc = PyDoc_STR("btfgen.probe.lines' bare handlers in C (optional)"),
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__btfgen_lines(void)
{
    PyObject *m;
    if (PyType_Ready(&LineType) < 0)
        return NULL;
    m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "INTERFACE", INTERFACE) < 0
        || PyModule_AddObjectRef(m, "Line", (PyObject *)&LineType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
