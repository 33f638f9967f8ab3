/*
 * adprouter._speedups: optional C versions of the binding's packing hot path.
 *
 * Router.route spends most of its Python time turning Request objects, their
 * token lists and per-rank match dicts into the flat buffers of adpr_batch
 * (include/adprouter.h). This module does the same work in C for the common,
 * well-formed case and produces byte-for-byte the buffers the pure-Python
 * code in adprouter/_pack.py produces. Whenever an input is anything but
 * the plain case (a subclass, an int out of range, a missing attribute, an
 * id not in the batch, ...) a function returns None and the binding redoes
 * the work in Python, which raises the documented errors: this module never
 * raises for bad input and has no error messages of its own.
 *
 * The caller's code can run in the middle of packing: an attribute's
 * __bool__ or __len__, a buffer's exporter, and any allocation of a tracked
 * object (a garbage collection runs __del__ methods and gc callbacks), which
 * may mutate the batch, close or call the router. So no borrowed pointer
 * into the caller's objects is held across a point where that can happen:
 * the entry points work on tuples of the caller's lists, the packers hold
 * references to the values they read, and the match tables compare and hash
 * only exact ints and bools (their hashing and comparison run no Python
 * code; all_plain_ints): requests whose ids are anything else (an int
 * subclass with its own __eq__ could clear the row being read) go to the
 * Python path with the rest of the unusual cases. Request's repr holds each
 * field while its repr runs. python/tests/test_hostile.py holds the hostile
 * cases, run under -X dev and valgrind by ./build.sh test.
 *
 * Self-contained, CPython C API only (not the limited API: it reads slot
 * offsets from member descriptors and small ints directly). Built by the
 * package build when a compiler is present; without it the binding runs the
 * pure-Python path with identical results.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <string.h>

/* The ABI's structs (adpr_request, adpr_rank_state, adpr_batch,
 * adpr_route_result) come from the library's own header: one layout,
 * checked by the compiler. Every build passes -I include/ (build.sh, the
 * package backend, test_speedups). */
#include "adprouter.h"

#ifndef Py_IS_TYPE /* before 3.9 */
#define Py_IS_TYPE(o, type) (Py_TYPE(o) == (type))
#endif

/* Slot layout of adprouter.Request and adprouter.RankState, set by
 * configure(): objects of exactly these types are read through their slot
 * offsets; any other object makes a function return None. */
enum { R_ID, R_TOKENS, R_NUM_TOKENS, R_TARGET, R_RELAX, R_CONV, R_LORA, R_SALT, R_MAX_NEW, R_SLOTS };
enum { S_RANK, S_ACTIVE, S_TOKENS, S_CAP, S_FREE, S_PRESSURE, S_PENDING, S_EVICTABLE, S_SLOTS };
static PyTypeObject *request_type, *state_type;
static Py_ssize_t request_off[R_SLOTS], state_off[S_SLOTS];

/* Sentinel for "not the plain case": the caller returns None. */
#define FALLBACK 1

static int slot_offsets(PyTypeObject *type, PyObject *names, Py_ssize_t *off, Py_ssize_t n)
{
    if (!PyTuple_Check(names) || PyTuple_GET_SIZE(names) != n) {
        PyErr_Format(PyExc_ValueError, "want a tuple of %zd slot names", n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyObject_GetAttr((PyObject *)type, PyTuple_GET_ITEM(names, i));
        if (d == NULL)
            return -1;
        /* A slot of type itself or a base: its offset lies within every
         * object of type (a metaclass could hand back another's). */
        if (!Py_IS_TYPE(d, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX ||
            !PyType_IsSubtype(type, PyDescr_TYPE(d))) {
            Py_DECREF(d);
            PyErr_Format(PyExc_TypeError, "%R is not a __slots__ attribute", PyTuple_GET_ITEM(names, i));
            return -1;
        }
        off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
    }
    return 0;
}

static PyObject *configure(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyTypeObject *rt, *st;
    PyObject *rnames, *snames;
    if (!PyArg_ParseTuple(args, "O!OO!O", &PyType_Type, &rt, &rnames, &PyType_Type, &st, &snames))
        return NULL;
    /* All or nothing: the offsets in use change only together with their
     * types (reading the names can run code that packs meanwhile). */
    Py_ssize_t roff[R_SLOTS], soff[S_SLOTS];
    if (slot_offsets(rt, rnames, roff, R_SLOTS) < 0 || slot_offsets(st, snames, soff, S_SLOTS) < 0)
        return NULL;
    PyTypeObject *old_rt = request_type, *old_st = state_type;
    Py_INCREF(rt);
    Py_INCREF(st);
    memcpy(request_off, roff, sizeof roff);
    memcpy(state_off, soff, sizeof soff);
    request_type = rt;
    state_type = st;
    Py_XDECREF(old_rt);
    Py_XDECREF(old_st);
    Py_RETURN_NONE;
}

/* Whether o is a sequence the C paths read: an exact list or tuple (the
 * entry points then work on a tuple of its items; see fill_requests). */
static inline int plain_seq(PyObject *o) { return PyList_CheckExact(o) || PyTuple_CheckExact(o); }

static inline PyObject *slot(PyObject *o, Py_ssize_t off) { return *(PyObject **)((char *)o + off); }

/* Whether the exact int o is at most one digit long (compact, from 3.12),
 * with its value in *v: below 2^PyLong_SHIFT <= 2^30 in magnitude, so it
 * fits int32. The fast path of every int read here. */
#if PyLong_SHIFT > 30
#error "small_int assumes one-digit ints fit int32"
#endif
static inline int small_int(PyObject *o, int32_t *v)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (PyUnstable_Long_IsCompact((PyLongObject *)o)) {
        *v = (int32_t)PyUnstable_Long_CompactValue((PyLongObject *)o);
        return 1;
    }
#else
    Py_ssize_t size = Py_SIZE(o);
    if ((size_t)(size + 1) <= 2) {
        *v = (int32_t)size * (int32_t)((PyLongObject *)o)->ob_digit[0];
        return 1;
    }
#endif
    return 0;
}

/* Reads an int the way struct.pack reads it for a format with bounds
 * [lo, hi]; only exact ints and bools, anything else (including an
 * __index__ object) is FALLBACK. */
static inline int read_int(PyObject *o, long long lo, long long hi, long long *out)
{
    long long v;
    if (PyLong_CheckExact(o)) {
        int32_t small;
        if (small_int(o, &small)) {
            v = small;
            goto check;
        }
    } else if (!PyLong_Check(o)) {
        return FALLBACK;
    }
    {
        int overflow;
        v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return FALLBACK;
        }
    }
check:
    if (v < lo || v > hi)
        return FALLBACK;
    *out = v;
    return 0;
}

/* uint64 as struct's "Q": exact ints (and bools) in 0..2^64-1. */
static inline int read_u64(PyObject *o, uint64_t *out)
{
    long long v;
    if (read_int(o, 0, INT64_MAX, &v) == 0) {
        *out = (uint64_t)v;
        return 0;
    }
    if (!PyLong_Check(o))
        return FALLBACK;
    unsigned long long u = PyLong_AsUnsignedLongLong(o);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return FALLBACK;
    }
    *out = u;
    return 0;
}

/* A growable byte buffer. */
typedef struct {
    char *p;
    Py_ssize_t len, cap;
} growbuf;

static int grow(growbuf *b, Py_ssize_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int is_int32_format(const char *f)
{
    return f != NULL && (!strcmp(f, "i") || !strcmp(f, "l") || !strcmp(f, "=i") || !strcmp(f, "<i"));
}

/* Whether view is a contiguous 1-D vector of int32, as the Python path's
 * memoryview checks accept it. */
static int int32_vector(const Py_buffer *view)
{
    return view->ndim == 1 && view->shape != NULL && view->itemsize == 4 && is_int32_format(view->format) &&
           (view->strides == NULL || view->strides[0] == 4);
}

/* Gets o's buffer as a 1-D int32 vector (int32_vector): 0 with view to
 * release, or FALLBACK with nothing held. */
static int int32_view(PyObject *o, Py_buffer *view)
{
    if (PyObject_GetBuffer(o, view, PyBUF_FORMAT | PyBUF_STRIDES) < 0) {
        PyErr_Clear();
        return FALLBACK;
    }
    if (!int32_vector(view)) {
        PyBuffer_Release(view);
        return FALLBACK;
    }
    return 0;
}

/* A token as append_tokens reads it: a one-digit int needs no range check
 * (see small_int); anything else goes through read_int. Most of a batch's
 * packing time is this, once per token. */
static inline int token_int32(PyObject *o, int32_t *out)
{
    if (PyLong_CheckExact(o) && small_int(o, out))
        return 0;
    long long v;
    if (read_int(o, INT32_MIN, INT32_MAX, &v))
        return FALLBACK;
    *out = (int32_t)v;
    return 0;
}

/* Appends the first `limit` tokens of toks (limit < 0: all) as int32 to b.
 * Sets *len to len(toks). Returns 0, FALLBACK or -1 (memory error). */
static int append_tokens(growbuf *b, PyObject *toks, Py_ssize_t limit, Py_ssize_t *len)
{
    if (plain_seq(toks)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(toks);
        PyObject **items = PySequence_Fast_ITEMS(toks);
        Py_ssize_t k = limit < 0 || limit > n ? n : limit;
        *len = n;
        if (grow(b, 4 * k) < 0)
            return -1;
        int32_t *out = (int32_t *)(b->p + b->len);
        for (Py_ssize_t i = 0; i < k; i++)
            if (token_int32(items[i], &out[i]))
                return FALLBACK;
        b->len += 4 * k;
        return 0;
    }
    Py_buffer view;
    if (int32_view(toks, &view))
        return FALLBACK;
    Py_ssize_t n = view.shape[0];
    Py_ssize_t k = limit < 0 || limit > n ? n : limit;
    *len = n;
    int rc = grow(b, 4 * k);
    if (rc == 0) {
        memcpy(b->p + b->len, view.buf, 4 * k);
        b->len += 4 * k;
    }
    PyBuffer_Release(&view);
    return rc;
}

/* Token lists whose tokens trtllm_route reads after every item's fields
 * (as the Python path reads them when it packs, after building every
 * Request), so that one pass over all the lists can read ahead: each entry
 * holds a reference to a list or tuple, its length when its fields were
 * read, and the k tokens to write at position at of the token buffer. */
typedef struct {
    PyObject *toks;
    Py_ssize_t size, k, at;
} deferred;

typedef struct {
    deferred *d;
    Py_ssize_t n;
} deferq;

/* Reserves room for the first `limit` tokens of toks (a list or tuple; limit
 * < 0: all) in b and queues them in q. Sets *len to len(toks). 0 or -1. */
static int defer_tokens(deferq *q, growbuf *b, PyObject *toks, Py_ssize_t limit, Py_ssize_t *len)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(toks);
    Py_ssize_t k = limit < 0 || limit > n ? n : limit;
    *len = n;
    if (grow(b, 4 * k) < 0)
        return -1;
    Py_INCREF(toks);
    q->d[q->n++] = (deferred){toks, n, k, b->len / 4};
    b->len += 4 * k;
    return 0;
}

/* The tokens of queued list a still there to read: its k, or fewer when
 * code run since its fields were read shrank it (its item array may then be
 * smaller, or gone). */
static inline Py_ssize_t deferred_readable(const deferred *a)
{
    return Py_MIN(a->k, PySequence_Fast_GET_SIZE(a->toks));
}

/* How far ahead read_deferred fetches a list's ints: the first TOKEN_AHEAD
 * of the next list while one is read, and within a list the int
 * TOKEN_AHEAD tokens on. 128 took about 8% off index mode's route_requests
 * (2k-token prompts, 256 and 1024 requests) against no read-ahead within a
 * list; 64 and 256 gained less. */
enum { TOKEN_AHEAD = 128 };

/* Reads the queued tokens into b, reading ahead: the item arrays of the
 * lists two ahead and the first ints of the next one are fetched while one
 * list is read, and each list's ints TOKEN_AHEAD tokens ahead of the read
 * (a batch's prompts are mostly out of cache when the engine calls the
 * router, and each token is a pointer to chase). Read-ahead stays
 * within each list's present length. A list whose length changed since its
 * fields were read (code the caller's objects ran) is FALLBACK. 0 or
 * FALLBACK; the references stay queued (deferq_release). */
static int read_deferred(const deferq *q, growbuf *b)
{
    enum { AHEAD = 2 };
    int32_t *out = (int32_t *)b->p;
    for (Py_ssize_t j = 0; j < q->n; j++) {
        if (j + AHEAD < q->n) {
            const deferred *a = &q->d[j + AHEAD];
            PyObject **it = PySequence_Fast_ITEMS(a->toks);
            for (Py_ssize_t i = 0, n = deferred_readable(a); i < n; i += 8)
                __builtin_prefetch(&it[i]);
        }
        if (j + 1 < q->n) {
            const deferred *a = &q->d[j + 1];
            PyObject **it = PySequence_Fast_ITEMS(a->toks);
            for (Py_ssize_t i = 0, n = Py_MIN(deferred_readable(a), TOKEN_AHEAD); i < n; i++)
                __builtin_prefetch(it[i]);
        }
        const deferred *d = &q->d[j];
        if (PySequence_Fast_GET_SIZE(d->toks) != d->size)
            return FALLBACK;
        PyObject **it = PySequence_Fast_ITEMS(d->toks);
        /* The first TOKEN_AHEAD ints were fetched with the list before;
         * the rest are fetched TOKEN_AHEAD tokens ahead of the read. */
        for (Py_ssize_t i = 0; i < d->k; i++) {
            if (i + TOKEN_AHEAD < d->k)
                __builtin_prefetch(it[i + TOKEN_AHEAD]);
            if (token_int32(it[i], &out[d->at + i]))
                return FALLBACK;
        }
    }
    return 0;
}

static void deferq_release(deferq *q)
{
    for (Py_ssize_t j = 0; j < q->n; j++)
        Py_DECREF(q->d[j].toks);
    q->n = 0;
}

/* pack_request's work on a request's attribute values f (which it holds
 * references to), in slot order. With dq non-NULL, a list or tuple of
 * tokens is queued there (read_deferred reads it) rather than read now. */
static int pack_fields(PyObject *const *f, Py_ssize_t limit, adpr_request *out, growbuf *tok, growbuf *text,
                       deferq *dq)
{
    PyObject *id = f[R_ID], *toks = f[R_TOKENS], *ntok = f[R_NUM_TOKENS], *target = f[R_TARGET],
             *relax = f[R_RELAX], *cid = f[R_CONV], *lora = f[R_LORA], *salt = f[R_SALT], *max_new = f[R_MAX_NEW];
    if (!id || !toks || !ntok || !target || !relax || !cid)
        return FALLBACK;
    memset(out, 0, sizeof *out);
    if (read_u64(id, &out->id))
        return FALLBACK;
    long long n = 0;
    if (ntok != Py_None && read_int(ntok, INT64_MIN, INT64_MAX, &n))
        return FALLBACK;
    out->token_offset = tok->len / 4;
    if (toks != Py_None) {
        Py_ssize_t len;
        int rc = dq != NULL && plain_seq(toks) ? defer_tokens(dq, tok, toks, limit, &len)
                                               : append_tokens(tok, toks, limit, &len);
        if (rc)
            return rc;
        if (ntok == Py_None)
            n = len;
        else if (n < len)
            return FALLBACK;
    }
    out->token_count = tok->len / 4 - out->token_offset;
    out->num_tokens = n;
    out->conversation_offset = text->len;
    if (cid != Py_None) {
        const char *s;
        Py_ssize_t len;
        if (PyUnicode_CheckExact(cid)) {
            s = PyUnicode_AsUTF8AndSize(cid, &len);
            if (s == NULL) {
                PyErr_Clear();
                return FALLBACK;
            }
        } else if (PyBytes_CheckExact(cid)) {
            s = PyBytes_AS_STRING(cid);
            len = PyBytes_GET_SIZE(cid);
        } else if (PyByteArray_CheckExact(cid)) {
            s = PyByteArray_AS_STRING(cid);
            len = PyByteArray_GET_SIZE(cid);
        } else {
            return FALLBACK;
        }
        if (grow(text, len) < 0)
            return -1;
        memcpy(text->p + text->len, s, len);
        text->len += len;
        out->conversation_len = len;
    }
    long long t = -1;
    if (target != Py_None && read_int(target, 0, INT32_MAX, &t))
        return FALLBACK;
    out->target_rank = (int32_t)t;
    if (relax == Py_True || relax == Py_False) {
        out->relax = relax == Py_True;
    } else {
        int r = PyObject_IsTrue(relax);
        if (r < 0) {
            PyErr_Clear();
            return FALLBACK;
        }
        out->relax = r;
    }
    if (lora && read_u64(lora, &out->lora_id))
        return FALLBACK;
    if (salt && read_u64(salt, &out->cache_salt))
        return FALLBACK;
    long long m = 0; /* out of range or negative: the library's error names it */
    if (max_new && read_int(max_new, INT64_MIN, INT64_MAX, &m))
        return FALLBACK;
    out->max_new_tokens = m;
    return 0;
}

/* Packs request q into *out and the token and text buffers. Code of the
 * caller's can run while it does (an object's __bool__ or __buffer__, a
 * garbage collection), so it holds references to the attribute values it
 * reads until it is done. With idref non-NULL, *idref receives a new
 * reference to the id object packed (see id_object); on FALLBACK or error
 * it may be set too, and the caller releases it either way. */
static int pack_request(PyObject *q, Py_ssize_t limit, adpr_request *out, growbuf *tok, growbuf *text,
                        PyObject **idref)
{
    if (!Py_IS_TYPE(q, request_type))
        return FALLBACK;
    PyObject *f[R_SLOTS];
    for (int k = 0; k < R_SLOTS; k++) {
        f[k] = slot(q, request_off[k]);
        Py_XINCREF(f[k]);
    }
    int rc = pack_fields(f, limit, out, tok, text, NULL);
    if (rc == 0 && idref != NULL) {
        Py_INCREF(f[R_ID]);
        *idref = f[R_ID];
    }
    for (int k = 0; k < R_SLOTS; k++)
        Py_XDECREF(f[k]);
    return rc;
}

/* Packs requests (a tuple: the callers snapshot the caller's list, so that
 * code run meanwhile cannot resize it under the loop) into
 * reqs[len(requests)] and the token and text buffers; with idrefs
 * (len(requests) NULLs) non-NULL, takes references to the id objects as
 * pack_request does. Returns 0, FALLBACK or -1 (memory error). */
static int fill_requests(PyObject *requests, Py_ssize_t limit, adpr_request *reqs, growbuf *tok, growbuf *text,
                         PyObject **idrefs)
{
    if (request_type == NULL)
        return FALLBACK;
    Py_ssize_t nr = PyTuple_GET_SIZE(requests);
    PyObject **items = &PyTuple_GET_ITEM(requests, 0);
    int rc = 0;
    for (Py_ssize_t i = 0; i < nr && rc == 0; i++)
        rc = pack_request(items[i], limit, &reqs[i], tok, text, idrefs ? &idrefs[i] : NULL);
    return rc;
}

/* send_tokens as a limit: None is -1 (whole prompts). */
static int send_limit(PyObject *send, Py_ssize_t *limit)
{
    *limit = -1;
    if (send != Py_None) {
        *limit = PyLong_AsSsize_t(send);
        if (*limit == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

static PyObject *pack_requests(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *requests, *send;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "OO", &requests, &send) || send_limit(send, &limit) < 0)
        return NULL;
    if (request_type == NULL || !plain_seq(requests))
        Py_RETURN_NONE;
    PyObject *reqs = PySequence_Tuple(requests);
    if (reqs == NULL)
        return NULL;
    Py_ssize_t nr = PyTuple_GET_SIZE(reqs);
    PyObject *rbuf = PyBytes_FromStringAndSize(NULL, nr * (Py_ssize_t)sizeof(adpr_request));
    if (rbuf == NULL) {
        Py_DECREF(reqs);
        return NULL;
    }
    growbuf tok = {0}, text = {0};
    PyObject *result = NULL;
    int rc = fill_requests(reqs, limit, (adpr_request *)PyBytes_AS_STRING(rbuf), &tok, &text, NULL);
    Py_DECREF(reqs);
    if (rc == FALLBACK) {
        result = Py_None;
        Py_INCREF(result);
    } else if (rc == 0) {
        result = Py_BuildValue("(Ny#ny#)", rbuf, tok.p ? tok.p : "", tok.len, tok.len / 4,
                               text.p ? text.p : "", text.len);
        rbuf = NULL; /* stolen by N, even on failure */
    }
    Py_XDECREF(rbuf);
    PyMem_Free(tok.p);
    PyMem_Free(text.p);
    return result;
}

/* Packs states (a tuple, as fill_requests) into st[len(states)]. The
 * memory-pressure flag's truth test, which may run Python code, comes after
 * the state's other values are read. Returns 0 or FALLBACK. */
static int fill_states(PyObject *states, adpr_rank_state *st)
{
    if (state_type == NULL)
        return FALLBACK;
    Py_ssize_t ns = PyTuple_GET_SIZE(states);
    PyObject **items = &PyTuple_GET_ITEM(states, 0);
    for (Py_ssize_t i = 0; i < ns; i++) {
        PyObject *s = items[i];
        if (!Py_IS_TYPE(s, state_type))
            return FALLBACK;
        PyObject *v[S_SLOTS];
        for (int k = 0; k < S_SLOTS; k++) {
            v[k] = slot(s, state_off[k]);
            if (v[k] == NULL)
                return FALLBACK;
        }
        long long rank, active, tokens, cap, free_, pending = 0, evictable = 0;
        if (read_int(v[S_RANK], INT32_MIN, INT32_MAX, &rank) ||
            read_int(v[S_ACTIVE], INT32_MIN, INT32_MAX, &active) ||
            read_int(v[S_TOKENS], INT64_MIN, INT64_MAX, &tokens) ||
            read_int(v[S_CAP], INT64_MIN, INT64_MAX, &cap) ||
            read_int(v[S_FREE], INT64_MIN, INT64_MAX, &free_) ||
            (v[S_PENDING] != Py_None && read_int(v[S_PENDING], INT64_MIN, INT64_MAX, &pending)) ||
            (v[S_EVICTABLE] != Py_None && read_int(v[S_EVICTABLE], INT64_MIN, INT64_MAX, &evictable)))
            return FALLBACK;
        /* None: not reported (no flag). */
        uint32_t known = (v[S_PENDING] != Py_None ? ADPR_RANK_PENDING_KV : 0) |
                         (v[S_EVICTABLE] != Py_None ? ADPR_RANK_EVICTABLE_KV : 0);
        /* Its __bool__ may rebind s.memory_pressure: hold the flag. */
        Py_INCREF(v[S_PRESSURE]);
        int pressure = PyObject_IsTrue(v[S_PRESSURE]);
        Py_DECREF(v[S_PRESSURE]);
        if (pressure < 0) {
            PyErr_Clear();
            return FALLBACK;
        }
        adpr_rank_state r = {(int32_t)rank, (int32_t)active, tokens, cap, free_, (uint32_t)pressure | known, 0,
                             pending, evictable};
        st[i] = r;
    }
    return 0;
}

static PyObject *pack_states(PyObject *Py_UNUSED(self), PyObject *states)
{
    if (state_type == NULL || !plain_seq(states))
        Py_RETURN_NONE;
    PyObject *sts = PySequence_Tuple(states);
    if (sts == NULL)
        return NULL;
    Py_ssize_t ns = PyTuple_GET_SIZE(sts);
    PyObject *out = PyBytes_FromStringAndSize(NULL, ns * (Py_ssize_t)sizeof(adpr_rank_state));
    int rc = out == NULL ? -1 : fill_states(sts, (adpr_rank_state *)PyBytes_AS_STRING(out));
    Py_DECREF(sts);
    if (rc == 0)
        return out;
    Py_XDECREF(out);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* Reads a match length: an exact int in 0..2^31-1 (negative values go to
 * the Python path, which lets the library reject them). */
static inline int read_match(PyObject *o, int32_t *out)
{
    long long v;
    if (read_int(o, INT32_MIN, INT32_MAX, &v))
        return FALLBACK;
    *out = (int32_t)v;
    return 0;
}

/* New references to the ids of requests (a tuple) in ids[len(requests)],
 * for the match tables; FALLBACK if one is not a Request. The caller
 * releases ids[] (NULLs included) either way. */
static int request_ids(PyObject *requests, PyObject **ids)
{
    Py_ssize_t nr = PyTuple_GET_SIZE(requests);
    for (Py_ssize_t i = 0; i < nr; i++) {
        PyObject *q = PyTuple_GET_ITEM(requests, i);
        if (!Py_IS_TYPE(q, request_type) || (ids[i] = slot(q, request_off[R_ID])) == NULL)
            return FALLBACK;
        Py_INCREF(ids[i]);
    }
    return 0;
}

/* Whether o is an int whose hashing and comparison run no Python code: a
 * match table's keys, and the request ids they are looked up among, must
 * be (see all_plain_ints), so that nothing can change the row being read
 * while it is read. */
static inline int plain_int(PyObject *o) { return PyLong_CheckExact(o) || PyBool_Check(o); }

/* Whether a and b are the same object or equal exact ints. */
static inline int same_int(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    if (!PyLong_CheckExact(a) || !PyLong_CheckExact(b))
        return 0;
    int eq = PyObject_RichCompareBool(a, b, Py_EQ);
    if (eq < 0)
        PyErr_Clear();
    return eq > 0;
}

/* {request id: position}, built on first need (ids all plain_int: their
 * hashing runs no Python code; allocating the dict can collect garbage, so
 * callers hold no borrowed pointer into a row across this call). */
static PyObject *positions(PyObject **ids, Py_ssize_t nr)
{
    PyObject *pos = PyDict_New();
    if (pos == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < nr; i++) {
        PyObject *k = PyLong_FromSsize_t(i);
        if (k == NULL || PyDict_SetItem(pos, ids[i], k) < 0) {
            Py_XDECREF(k);
            Py_DECREF(pos);
            return NULL;
        }
        Py_DECREF(k);
    }
    return pos;
}

/* Looks id up in pos: 0 with *at set, FALLBACK when absent, -1 on error. */
static int lookup(PyObject *pos, PyObject *id, Py_ssize_t *at)
{
    if (!plain_int(id))
        return FALLBACK; /* an int subclass or other object: the Python path */
    PyObject *k = PyDict_GetItemWithError(pos, id);
    if (k == NULL) {
        if (PyErr_Occurred())
            PyErr_Clear(); /* an unhashable id: the Python path raises */
        return FALLBACK;
    }
    *at = PyLong_AsSsize_t(k);
    return 0;
}

/* Rank r's column from a dict {id: len}. The common dict names the batch's
 * requests in batch order (built by zipping ids with a probe row): walk it
 * alongside the ids, falling back to lookups from the first mismatch. */
static int fill_dict(PyObject *m, int32_t *out, Py_ssize_t ns, Py_ssize_t r, PyObject **ids, Py_ssize_t nr,
                     PyObject **pos)
{
    Py_ssize_t it = 0, i = 0;
    PyObject *key, *value;
    int in_order = PyDict_GET_SIZE(m) <= nr;
    while (in_order && PyDict_Next(m, &it, &key, &value)) {
        if (!same_int(key, ids[i])) {
            in_order = 0;
            break;
        }
        if (read_match(value, &out[i * ns + r]))
            return FALLBACK;
        i++;
    }
    if (in_order)
        return 0;
    if (*pos == NULL && (*pos = positions(ids, nr)) == NULL)
        return -1;
    for (Py_ssize_t k = 0; k < nr; k++)
        out[k * ns + r] = 0;
    it = 0;
    while (PyDict_Next(m, &it, &key, &value)) {
        Py_ssize_t at;
        int rc = lookup(*pos, key, &at);
        if (rc)
            return rc;
        if (read_match(value, &out[at * ns + r]))
            return FALLBACK;
    }
    return 0;
}

/* Rank r's column from a row aligned with the requests: a list or tuple of
 * ints, or a 1-D int32 buffer. */
static int fill_row(PyObject *m, int32_t *out, Py_ssize_t ns, Py_ssize_t r, Py_ssize_t nr)
{
    if (plain_seq(m)) {
        if (PySequence_Fast_GET_SIZE(m) != nr)
            return FALLBACK;
        PyObject **items = PySequence_Fast_ITEMS(m);
        for (Py_ssize_t i = 0; i < nr; i++)
            if (read_match(items[i], &out[i * ns + r]))
                return FALLBACK;
        return 0;
    }
    Py_buffer view;
    if (int32_view(m, &view))
        return FALLBACK;
    int rc = FALLBACK;
    if (view.shape[0] == nr) {
        for (Py_ssize_t i = 0; i < nr; i++)
            memcpy(&out[i * ns + r], (char *)view.buf + 4 * i, 4);
        rc = 0;
    }
    PyBuffer_Release(&view);
    return rc;
}

/* Rank r's column from a raw allgathered row [id, len, id, len, ...]: a
 * list or tuple of ints. Ids must be in the batch, each at most once. */
static int fill_pairs(PyObject *m, int32_t *out, Py_ssize_t ns, Py_ssize_t r, PyObject **ids, Py_ssize_t nr,
                      PyObject **pos, char *seen)
{
    if (!plain_seq(m))
        return FALLBACK;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(m);
    if (n % 2)
        return FALLBACK;
    if (*pos == NULL && (*pos = positions(ids, nr)) == NULL)
        return -1;
    if (PySequence_Fast_GET_SIZE(m) != n)
        return FALLBACK; /* changed by code positions() ran */
    PyObject **items = PySequence_Fast_ITEMS(m);
    memset(seen, 0, nr);
    for (Py_ssize_t k = 0; k < n; k += 2) {
        Py_ssize_t at = k / 2;
        /* Fast path: pairs in batch order. */
        if (!(at < nr && same_int(items[k], ids[at]))) {
            int rc = lookup(*pos, items[k], &at);
            if (rc)
                return rc;
        }
        if (seen[at])
            return FALLBACK;
        seen[at] = 1;
        if (read_match(items[k + 1], &out[at * ns + r]))
            return FALLBACK;
    }
    return 0;
}

/* Whether ids[0..nr) are all plain_int: the dict and pairs forms compare
 * and hash them (positions(), and the lookups in a dict of them), which
 * must run no Python code while fill_dict and fill_pairs hold borrowed
 * pointers into a row (an int subclass's __eq__ could clear the row and
 * free what they read). Other ids go to the Python path. */
static int all_plain_ints(PyObject **ids, Py_ssize_t nr)
{
    for (Py_ssize_t i = 0; i < nr; i++)
        if (!plain_int(ids[i]))
            return 0;
    return 1;
}

/* Fills table[nr * len(rows)] (zeroed by the caller) from rows, a tuple with
 * one entry per rank, in the dict/row forms or, with pairs, the raw [id,
 * len, ...] form; ids[nr] are the requests' ids, referenced by the caller
 * (FALLBACK unless all plain_int where a dict or pairs row needs them).
 * Returns 0, FALLBACK or -1 (memory error). */
static int fill_table(PyObject *rows, PyObject **ids, Py_ssize_t nr, int pairs, int32_t *table)
{
    Py_ssize_t ns = PyTuple_GET_SIZE(rows);
    char *seen = PyMem_Malloc(nr + 1);
    PyObject *pos = NULL;
    if (seen == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int rc = 0, ids_checked = 0;
    for (Py_ssize_t r = 0; r < ns && rc == 0; r++) {
        PyObject *m = PyTuple_GET_ITEM(rows, r);
        if ((pairs || PyDict_CheckExact(m)) && !ids_checked) {
            ids_checked = 1;
            if (!all_plain_ints(ids, nr)) {
                rc = FALLBACK;
                break;
            }
        }
        if (pairs)
            rc = fill_pairs(m, table, ns, r, ids, nr, &pos, seen);
        else if (PyDict_CheckExact(m))
            rc = fill_dict(m, table, ns, r, ids, nr, &pos);
        else
            rc = fill_row(m, table, ns, r, nr);
    }
    Py_XDECREF(pos);
    PyMem_Free(seen);
    return rc;
}

/* Releases the references ids[0..n) (NULLs skipped). */
static void release_refs(PyObject **ids, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        Py_XDECREF(ids[i]);
}

/* Releases ids[0..n) and frees the array. */
static void release_ids(PyObject **ids, Py_ssize_t n)
{
    if (ids == NULL)
        return;
    release_refs(ids, n);
    PyMem_Free(ids);
}

static PyObject *match_table(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *match_lens, *requests;
    int pairs;
    if (!PyArg_ParseTuple(args, "OOp", &match_lens, &requests, &pairs))
        return NULL;
    if (!plain_seq(match_lens) || !plain_seq(requests))
        Py_RETURN_NONE;
    PyObject *rows = PySequence_Tuple(match_lens), *reqs = rows ? PySequence_Tuple(requests) : NULL;
    if (reqs == NULL) {
        Py_XDECREF(rows);
        return NULL;
    }
    Py_ssize_t ns = PyTuple_GET_SIZE(rows), nr = PyTuple_GET_SIZE(reqs);
    PyObject *out = PyBytes_FromStringAndSize(NULL, 4 * ns * nr);
    PyObject **ids = PyMem_Calloc(nr + 1, sizeof *ids);
    int rc = -1;
    if (out == NULL || ids == NULL) {
        if (ids == NULL)
            PyErr_NoMemory();
    } else {
        memset(PyBytes_AS_STRING(out), 0, 4 * ns * nr);
        rc = request_ids(reqs, ids);
        if (rc == 0)
            rc = fill_table(rows, ids, nr, pairs, (int32_t *)PyBytes_AS_STRING(out));
    }
    release_ids(ids, nr);
    Py_DECREF(rows);
    Py_DECREF(reqs);
    if (rc == 0)
        return out;
    Py_XDECREF(out);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* A writable contiguous buffer of at least n bytes, or FALLBACK. */
static int out_buffer(PyObject *o, Py_ssize_t n, Py_buffer *view)
{
    if (PyObject_GetBuffer(o, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return FALLBACK;
    }
    if (view->len < n) {
        PyBuffer_Release(view);
        return FALLBACK;
    }
    return 0;
}

/* --- Decoding adpr_route_result ---------------------------------------------
 *
 * The result's ids become Python ints. Where route() packed the batch itself
 * it holds a reference to each request's id object, taken while packing (so
 * its value is the one the library routed: ints are immutable, and the
 * reference keeps it alive whatever code runs meanwhile), and the decoded
 * lists hold those objects where they are exact ints instead of new ints:
 * allocating an int per request was most of a decode on cold caches. An
 * idmap finds a request's position from its id. */

typedef struct {
    uint64_t *keys;  /* open addressing, linear probing */
    int32_t *pos;    /* per slot: request position + 1; 0 = empty */
    uint64_t mask;
    int shift;       /* Fibonacci hashing: slot = (id * K) >> shift */
    PyObject **refs; /* per position: a reference to its id object */
} idmap;

#define IDMAP_K 0x9E3779B97F4A7C15ull

/* A new reference to the int id: ref, the id object a request was packed
 * from, if it is an exact int (a bool or an int subclass decodes as the
 * Python path decodes it, as an int), else a new int. NULL on memory error. */
static PyObject *id_at(PyObject *ref, uint64_t id)
{
    if (ref != NULL && PyLong_CheckExact(ref)) {
        Py_INCREF(ref);
        return ref;
    }
    return PyLong_FromUnsignedLongLong(id);
}

/* id_at for the request m maps id to, or a new int without m. */
static PyObject *id_object(const idmap *m, uint64_t id)
{
    if (m != NULL) {
        for (uint64_t slot = (id * IDMAP_K) >> m->shift; m->pos[slot] != 0; slot = (slot + 1) & m->mask)
            if (m->keys[slot] == id)
                return id_at(m->refs[m->pos[slot] - 1], id);
    }
    return PyLong_FromUnsignedLongLong(id);
}

/* The ids of the unplaced requests (ranks[i] < 0), in input order, as
 * RouteResult.unassigned holds them: nr - placed of them, placed being the
 * count adpr_route's offsets give. */
static PyObject *unplaced_list(const int32_t *ranks, const adpr_request *reqs, PyObject **refs, Py_ssize_t nr,
                               Py_ssize_t placed)
{
    PyObject *lst = PyList_New(nr - placed);
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; lst != NULL && i < nr; i++) {
        if (ranks[i] >= 0)
            continue;
        PyObject *v = k < nr - placed ? id_at(refs[i], reqs[i].id) : NULL;
        if (v == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_SystemError, "adpr_route's unplaced requests disagree with its offsets");
            Py_CLEAR(lst);
        } else {
            PyList_SET_ITEM(lst, k++, v);
        }
    }
    if (lst != NULL && k != nr - placed) {
        PyErr_SetString(PyExc_SystemError, "adpr_route's unplaced requests disagree with its offsets");
        Py_CLEAR(lst);
    }
    return lst;
}

/* [ids[0], ..., ids[n-1]] as ints (see id_object). */
static PyObject *id_list(const uint64_t *ids, Py_ssize_t n, const idmap *m)
{
    PyObject *lst = PyList_New(n);
    for (Py_ssize_t i = 0; lst != NULL && i < n; i++) {
        PyObject *v = id_object(m, ids[i]);
        if (v == NULL)
            Py_CLEAR(lst);
        else
            PyList_SET_ITEM(lst, i, v);
    }
    return lst;
}

/* {rank: [ids placed on it, in placement order]} for ranks 0..nranks-1, as
 * RouteResult.assignment holds it: rank r's ids are order[off[r]..off[r+1]),
 * which the caller has checked lie within order. */
static PyObject *assignment_dict(const uint64_t *order, const int32_t *off, Py_ssize_t nranks, const idmap *m)
{
    PyObject *out = PyDict_New();
    for (Py_ssize_t r = 0; out != NULL && r < nranks; r++) {
        PyObject *lst = id_list(order + off[r], off[r + 1] - off[r], m), *key = NULL;
        if (lst == NULL || (key = PyLong_FromSsize_t(r)) == NULL || PyDict_SetItem(out, key, lst) < 0)
            Py_CLEAR(out);
        Py_XDECREF(key);
        Py_XDECREF(lst);
    }
    return out;
}

/* [v[0], ..., v[n-1]] as ints. */
static PyObject *int_list(const int32_t *v, Py_ssize_t n)
{
    PyObject *lst = PyList_New(n);
    for (Py_ssize_t i = 0; lst != NULL && i < n; i++) {
        PyObject *x = PyLong_FromLong(v[i]);
        if (x == NULL)
            Py_CLEAR(lst);
        else
            PyList_SET_ITEM(lst, i, x);
    }
    return lst;
}

/* Whether off[0..nranks] are offsets into nids ids, as adpr_route writes
 * them. */
static int offsets_ok(const int32_t *off, Py_ssize_t nranks, Py_ssize_t nids)
{
    if (nranks < 0 || off[0] != 0)
        return 0;
    for (Py_ssize_t r = 0; r < nranks; r++)
        if (off[r] > off[r + 1] || off[r + 1] > nids)
            return 0;
    return 1;
}

/* Working memory of route and trtllm_route, kept between calls: a batch's
 * buffers are as large as the batch (with the prefix index, whole prompts:
 * megabytes), and allocating them afresh for every call cost a page fault
 * per page (at 1024 requests, 75-120 faults a call). A call takes a scratch
 * from the pool and gives it back when done, both under the GIL, so calls
 * on other threads, which run while one has released the GIL, never share
 * one. At most SCRATCH_POOL are kept, and a buffer larger than SCRATCH_KEEP
 * bytes is freed rather than kept. */
enum { SB_STATES, SB_REQS, SB_RANKS, SB_OFFSETS, SB_ORDER, SB_TABLE, SB_KEYS, SB_POS, SB_DEFER, SB_IDREFS, SB_N };
#define SCRATCH_POOL 4
#define SCRATCH_KEEP ((size_t)64 << 20)

typedef struct scratch {
    void *buf[SB_N];
    size_t cap[SB_N];
    growbuf tok, text;
    struct scratch *next;
} scratch;

static scratch *scratch_pool;
static int scratch_pooled;

static scratch *scratch_take(void)
{
    scratch *s = scratch_pool;
    if (s != NULL) {
        scratch_pool = s->next;
        scratch_pooled--;
    } else if ((s = PyMem_Calloc(1, sizeof *s)) == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    s->tok.len = s->text.len = 0;
    return s;
}

static void scratch_give(scratch *s)
{
    for (int k = 0; k < SB_N; k++)
        if (s->cap[k] > SCRATCH_KEEP) {
            PyMem_Free(s->buf[k]);
            s->buf[k] = NULL;
            s->cap[k] = 0;
        }
    growbuf *g[2] = {&s->tok, &s->text};
    for (int k = 0; k < 2; k++)
        if ((size_t)g[k]->cap > SCRATCH_KEEP) {
            PyMem_Free(g[k]->p);
            g[k]->p = NULL;
            g[k]->cap = 0;
        }
    if (scratch_pooled < SCRATCH_POOL) {
        s->next = scratch_pool;
        scratch_pool = s;
        scratch_pooled++;
        return;
    }
    for (int k = 0; k < SB_N; k++)
        PyMem_Free(s->buf[k]);
    PyMem_Free(s->tok.p);
    PyMem_Free(s->text.p);
    PyMem_Free(s);
}

/* Buffer k of s with room for n bytes (contents undefined), or NULL with
 * MemoryError set. */
static void *scratch_buf(scratch *s, int k, size_t n)
{
    if (n == 0)
        n = 1;
    if (s->cap[k] < n) {
        size_t cap = 64;
        while (cap < n)
            cap *= 2;
        PyMem_Free(s->buf[k]);
        s->buf[k] = PyMem_Malloc(cap);
        s->cap[k] = s->buf[k] != NULL ? cap : 0;
        if (s->buf[k] == NULL)
            PyErr_NoMemory();
    }
    return s->buf[k];
}

/* Maps the ids of reqs[nr] to their positions, in s's memory (valid until s
 * goes back to the pool); refs: the id objects (see id_at), or NULL.
 * Returns 0 or -1 (memory error, raised). */
static int idmap_init(idmap *m, const adpr_request *reqs, Py_ssize_t nr, PyObject **refs, scratch *s)
{
    Py_ssize_t size = 2;
    int shift = 63;
    while (size < 2 * nr) {
        size *= 2;
        shift--;
    }
    m->keys = scratch_buf(s, SB_KEYS, size * sizeof *m->keys);
    m->pos = m->keys ? scratch_buf(s, SB_POS, size * sizeof *m->pos) : NULL;
    if (m->pos == NULL)
        return -1;
    memset(m->pos, 0, size * sizeof *m->pos);
    m->mask = (uint64_t)size - 1;
    m->shift = shift;
    m->refs = refs;
    for (Py_ssize_t i = 0; i < nr; i++) {
        uint64_t id = reqs[i].id, slot = (id * IDMAP_K) >> shift;
        while (m->pos[slot] != 0 && m->keys[slot] != id)
            slot = (slot + 1) & m->mask;
        m->keys[slot] = id; /* a repeated id keeps its last position: see trtllm_route */
        m->pos[slot] = (int32_t)(i + 1);
    }
    return 0;
}

/* The buffers one adpr_route call packs into and reads back, in a scratch:
 * the batch's states and requests, the result's arrays and, with
 * want_table, the match table (zeroed). */
typedef struct {
    adpr_rank_state *st;
    adpr_request *reqs;
    int32_t *ranks, *offsets;
    uint64_t *order;
    int32_t *table; /* NULL without want_table */
} routebufs;

/* Fills b from s for ns states and nr requests. 0, or -1 with MemoryError
 * set. */
static int route_buffers(scratch *s, Py_ssize_t ns, Py_ssize_t nr, int want_table, routebufs *b)
{
    memset(b, 0, sizeof *b);
    if ((b->st = scratch_buf(s, SB_STATES, ns * sizeof *b->st)) == NULL ||
        (b->reqs = scratch_buf(s, SB_REQS, nr * sizeof *b->reqs)) == NULL ||
        (b->ranks = scratch_buf(s, SB_RANKS, 4 * nr)) == NULL ||
        (b->offsets = scratch_buf(s, SB_OFFSETS, 4 * (ns + 1))) == NULL ||
        (b->order = scratch_buf(s, SB_ORDER, 8 * nr)) == NULL)
        return -1;
    if (want_table) {
        if ((b->table = scratch_buf(s, SB_TABLE, 4 * ns * nr)) == NULL)
            return -1;
        memset(b->table, 0, 4 * ns * nr);
    }
    return 0;
}

/* --- route: packing, the adpr_route call and decoding in one ----------------
 *
 * adpr_route's signature, for calling it by the address ctypes found. */
typedef int32_t (*adpr_route_fn)(uint64_t router, const adpr_batch *batch, adpr_route_result *result, char *err,
                                 size_t err_len);

/* route(adpr_route address, handle, states, requests, send_tokens,
 * match_lens, pairs, max_num_active_requests, errbuf) packs the batch as the
 * functions above do, calls adpr_route with the GIL released and returns
 * (status, expected, assignment, unassigned, ranks): the RouteResult fields,
 * decoded (None when status is not ADPR_OK, the message then in errbuf); or
 * None, having called nothing, where the Python path must run. The caller
 * has checked the handle and max_num_active_requests, and holds no lock:
 * code packing runs may call the same router (the library serialises the
 * calls; a handle closed meanwhile gets ADPR_ERR_INVALID_HANDLE). errbuf is
 * the caller's for this call alone. */
static PyObject *route(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "route() takes 9 arguments");
        return NULL;
    }
    PyObject *states = args[2], *requests = args[3], *match_lens = args[5];
    void *fn = PyLong_AsVoidPtr(args[0]);
    unsigned long long handle = PyLong_AsUnsignedLongLong(args[1]);
    Py_ssize_t limit;
    int pairs = PyObject_IsTrue(args[6]);
    long maxn = PyLong_AsLong(args[7]);
    if (PyErr_Occurred() || pairs < 0 || send_limit(args[4], &limit) < 0)
        return NULL;
    if (fn == NULL || request_type == NULL || !plain_seq(states) || !plain_seq(requests) ||
        (match_lens != Py_None && !plain_seq(match_lens)))
        Py_RETURN_NONE;
    /* Tuples of the caller's lists: packing can run the caller's code (see
     * pack_request; a collection while these are made, too), which must not
     * resize a list under the loops. Everything is sized from them. */
    PyObject *sts = PySequence_Tuple(states), *rqs = sts ? PySequence_Tuple(requests) : NULL;
    PyObject *rows = rqs && match_lens != Py_None ? PySequence_Tuple(match_lens) : NULL;
    if (rqs == NULL || (match_lens != Py_None && rows == NULL)) {
        Py_XDECREF(sts);
        Py_XDECREF(rqs);
        return NULL;
    }
    Py_ssize_t ns = PyTuple_GET_SIZE(sts), nr = PyTuple_GET_SIZE(rqs);
    if (ns > INT32_MAX || nr > INT32_MAX || maxn < 1 || maxn > INT32_MAX ||
        (rows != NULL && PyTuple_GET_SIZE(rows) != ns)) {
        Py_DECREF(sts);
        Py_DECREF(rqs);
        Py_XDECREF(rows);
        Py_RETURN_NONE;
    }

    Py_buffer err = {0};
    scratch *sc = scratch_take();
    if (sc == NULL) {
        Py_DECREF(sts);
        Py_DECREF(rqs);
        Py_XDECREF(rows);
        return NULL;
    }
    routebufs rb;
    PyObject **idrefs = NULL;
    int rc = route_buffers(sc, ns, nr, match_lens != Py_None, &rb);
    if (rc == 0 && (idrefs = scratch_buf(sc, SB_IDREFS, nr * sizeof *idrefs)) == NULL)
        rc = -1; /* MemoryError set */
    if (idrefs != NULL)
        memset(idrefs, 0, nr * sizeof *idrefs); /* release_refs reads them all */
    adpr_rank_state *st = rb.st;
    adpr_request *reqs = rb.reqs;
    int32_t *ranks = rb.ranks, *offsets = rb.offsets, *table = rb.table;
    uint64_t *order = rb.order;
    growbuf *tok = &sc->tok, *text = &sc->text;
    PyObject *result = NULL;
    int have_err = 0;
    if (rc == 0)
        rc = fill_states(sts, st);
    if (rc == 0)
        rc = fill_requests(rqs, limit, reqs, tok, text, idrefs);
    if (rc == 0 && table != NULL)
        rc = fill_table(rows, idrefs, nr, pairs, table);
    if (rc == 0 && (rc = out_buffer(args[8], 1, &err)) == 0)
        have_err = 1;
    if (rc == 0) {
        adpr_batch batch = {
            ns ? st : NULL, (int32_t)ns, (int32_t)nr, nr ? reqs : NULL,
            tok->len ? (const int32_t *)tok->p : NULL, tok->len / 4,
            text->len ? text->p : NULL, text->len,
            table != NULL && ns > 0 && nr > 0 ? table : NULL, (int32_t)maxn,
        };
        adpr_route_result out = {ranks, order, offsets, 0, 0};
        int32_t status;
        Py_BEGIN_ALLOW_THREADS
        status = ((adpr_route_fn)fn)((uint64_t)handle, &batch, &out, err.buf, (size_t)err.len);
        Py_END_ALLOW_THREADS
        if (status != ADPR_OK) {
            result = Py_BuildValue("(iiOOO)", (int)status, (int)out.expected, Py_None, Py_None, Py_None);
        } else if (!offsets_ok(offsets, ns, nr)) {
            PyErr_SetString(PyExc_SystemError, "adpr_route wrote rank offsets outside its result");
        } else {
            idmap m;
            if (idmap_init(&m, reqs, nr, idrefs, sc) == 0) {
                PyObject *assign = assignment_dict(order, offsets, ns, &m);
                PyObject *unassigned = assign ? unplaced_list(ranks, reqs, idrefs, nr, offsets[ns]) : NULL;
                PyObject *rank_list = unassigned ? int_list(ranks, nr) : NULL;
                if (rank_list != NULL)
                    result = Py_BuildValue("(iiNNN)", (int)status, (int)out.expected, assign, unassigned,
                                           rank_list); /* N steals, even on failure */
                else {
                    Py_XDECREF(assign);
                    Py_XDECREF(unassigned);
                }
            }
        }
    } else if (rc == FALLBACK) {
        result = Py_None;
        Py_INCREF(result);
    }
    if (have_err)
        PyBuffer_Release(&err);
    if (idrefs != NULL)
        release_refs(idrefs, nr);
    scratch_give(sc);
    Py_DECREF(sts);
    Py_DECREF(rqs);
    Py_XDECREF(rows);
    return result;
}

/* assignment(order, offsets) -> {rank: [ids placed on it, in order]} for
 * every rank, from adpr_route_result's order (uint64) and rank_offsets
 * (int32, dp_size + 1 values) buffers, as RouteResult.assignment holds it;
 * None if the buffers are not what the binding passes. The ctypes path's
 * decoder (route() decodes its own results). */
static PyObject *assignment(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *order_obj, *offsets_obj, *out = NULL;
    if (!PyArg_ParseTuple(args, "OO", &order_obj, &offsets_obj))
        return NULL;
    Py_buffer order, offsets;
    if (PyObject_GetBuffer(order_obj, &order, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (PyObject_GetBuffer(offsets_obj, &offsets, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        PyBuffer_Release(&order);
        Py_RETURN_NONE;
    }
    Py_ssize_t nids = order.len / 8, nranks = offsets.len / 4 - 1;
    if (order.len % 8 == 0 && offsets.len % 4 == 0 && offsets_ok(offsets.buf, nranks, nids)) {
        out = assignment_dict(order.buf, offsets.buf, nranks, NULL);
    } else {
        out = Py_None;
        Py_INCREF(out);
    }
    PyBuffer_Release(&order);
    PyBuffer_Release(&offsets);
    return out;
}

/* --- Request: the C form of adprouter.Request -------------------------------
 *
 * Building 256 Request objects through the Python class costs about as much
 * as routing them (a Python __init__ frame with keyword arguments and eight
 * slot stores each). This type has the same attributes (mutable, deletable,
 * read by the packer through the same member-descriptor offsets as the
 * class's __slots__), the same signature and defaults, the same repr and the
 * same call errors, and is constructed through vectorcall without a Python
 * frame. The binding exports it as adprouter.Request when this module loads;
 * the pure-Python class stays the definition (and is used without the
 * module). Subclasses are plain heap types: they construct through
 * __new__/__init__ and go to the Python packing path like any subclass. */

enum { RQ_NFIELDS = 9 };

typedef struct {
    PyObject_HEAD
    PyObject *f[RQ_NFIELDS]; /* id, tokens, num_tokens, target_rank, relax, conversation_id, lora_id, cache_salt,
                                max_new_tokens */
} RequestObject;

static const char *const rq_names[RQ_NFIELDS] = {
    "id", "tokens", "num_tokens", "target_rank", "relax", "conversation_id", "lora_id", "cache_salt", "max_new_tokens",
};
static PyObject *rq_interned[RQ_NFIELDS];
static PyObject *rq_zero;

/* The default of field i (a new reference). */
static PyObject *rq_default(int i)
{
    PyObject *v = i == 4 ? Py_True : i >= 6 ? rq_zero : Py_None;
    Py_INCREF(v);
    return v;
}

/* Index of keyword name among the fields, or -1. */
static int rq_field(PyObject *name)
{
    for (int i = 0; i < RQ_NFIELDS; i++)
        if (name == rq_interned[i])
            return i;
    if (!PyUnicode_Check(name))
        return -1;
    for (int i = 0; i < RQ_NFIELDS; i++)
        if (PyUnicode_CompareWithASCIIString(name, rq_names[i]) == 0)
            return i;
    return -1;
}

/* Assigns the fields from positional values and keyword (name, value)
 * pairs, raising the errors Python raises for Request.__init__. Keyword
 * names and values come either from kwnames + kwvalues (vectorcall) or from
 * a dict. Returns 0 or -1. */
static int rq_assign(RequestObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                     PyObject *const *kwvalues, PyObject *kwdict)
{
    PyObject *v[RQ_NFIELDS] = {NULL};
    if (nargs > RQ_NFIELDS) {
        PyErr_Format(PyExc_TypeError,
                     "Request.__init__() takes from 2 to %d positional arguments but %zd were given",
                     RQ_NFIELDS + 1, nargs + 1);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0, pos = 0;
    PyObject *key, *value;
    for (Py_ssize_t k = 0;; k++) {
        if (kwnames) {
            if (k >= nkw)
                break;
            key = PyTuple_GET_ITEM(kwnames, k);
            value = kwvalues[k];
        } else if (kwdict == NULL || !PyDict_Next(kwdict, &pos, &key, &value)) {
            break;
        }
        int i = rq_field(key);
        if (i < 0) {
            if (PyUnicode_Check(key))
                PyErr_Format(PyExc_TypeError, "Request.__init__() got an unexpected keyword argument '%U'", key);
            else
                PyErr_SetString(PyExc_TypeError, "keywords must be strings");
            return -1;
        }
        if (v[i] != NULL) {
            PyErr_Format(PyExc_TypeError, "Request.__init__() got multiple values for argument '%s'", rq_names[i]);
            return -1;
        }
        v[i] = value;
    }
    if (v[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "Request.__init__() missing 1 required positional argument: 'id'");
        return -1;
    }
    for (int i = 0; i < RQ_NFIELDS; i++) {
        PyObject *nv;
        if (v[i] != NULL) {
            nv = v[i];
            Py_INCREF(nv);
        } else {
            nv = rq_default(i);
        }
        Py_XSETREF(self->f[i], nv);
    }
    return 0;
}

static PyObject *rq_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyTypeObject *tp = (PyTypeObject *)type;
    RequestObject *self = (RequestObject *)tp->tp_alloc(tp, 0);
    if (self == NULL)
        return NULL;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (rq_assign(self, args, nargs, kwnames, args + nargs, NULL) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int rq_init(PyObject *self, PyObject *args, PyObject *kwds)
{
    return rq_assign((RequestObject *)self, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args), NULL, NULL,
                     kwds);
}

static int rq_traverse(PyObject *self, visitproc visit, void *arg)
{
    for (int i = 0; i < RQ_NFIELDS; i++)
        Py_VISIT(((RequestObject *)self)->f[i]);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int rq_clear(PyObject *self)
{
    for (int i = 0; i < RQ_NFIELDS; i++)
        Py_CLEAR(((RequestObject *)self)->f[i]);
    return 0;
}

static void rq_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    rq_clear(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

/* A field for repr and __reduce__, raising AttributeError when deleted
 * with the message a slot's descriptor gives (from 3.13 it names the type
 * with its module). */
static PyObject *rq_get(PyObject *self, int i)
{
    PyObject *v = ((RequestObject *)self)->f[i];
    if (v == NULL)
#if PY_VERSION_HEX >= 0x030D0000
        PyErr_Format(PyExc_AttributeError, "'%T' object has no attribute '%s'", self, rq_names[i]);
#else
        PyErr_Format(PyExc_AttributeError, "'%.200s' object has no attribute '%s'", Py_TYPE(self)->tp_name,
                     rq_names[i]);
#endif
    return v;
}

/* Request(id=..., n=..., target_rank=..., relax=..., conversation_id=...),
 * n being num_tokens, else len(tokens or ()), as the Python class does: it
 * reads each field just before its repr (the compiler makes the class's
 * %-format an f-string), so a __repr__ that deletes a later field fails
 * the same way. Each field is held while its __bool__, __len__ or __repr__
 * runs: those may rebind or delete the request's fields. */
static PyObject *rq_repr(PyObject *self)
{
    static const int shown[5] = {0, -1, 3, 4, 5}; /* id, n, target_rank, relax, conversation_id */
    PyObject *ntok = rq_get(self, 2), *r[5] = {NULL}, *n, *out = NULL;
    if (ntok == NULL)
        return NULL;
    if (ntok != Py_None) {
        n = ntok;
        Py_INCREF(n);
    } else {
        PyObject *toks = rq_get(self, 1);
        if (toks == NULL)
            return NULL;
        Py_INCREF(toks);
        int truth = PyObject_IsTrue(toks);
        Py_ssize_t len = truth > 0 ? PyObject_Size(toks) : 0;
        Py_DECREF(toks);
        if (truth < 0 || len < 0)
            return NULL;
        n = PyLong_FromSsize_t(len);
        if (n == NULL)
            return NULL;
    }
    int k = 0;
    for (; k < 5; k++) {
        PyObject *v = shown[k] < 0 ? n : rq_get(self, shown[k]);
        if (v == NULL)
            break;
        Py_INCREF(v);
        r[k] = PyObject_Repr(v);
        Py_DECREF(v);
        if (r[k] == NULL)
            break;
    }
    if (k == 5)
        out = PyUnicode_FromFormat("Request(id=%U, n=%U, target_rank=%U, relax=%U, conversation_id=%U)", r[0], r[1],
                                   r[2], r[3], r[4]);
    for (int i = 0; i < 5; i++)
        Py_XDECREF(r[i]);
    Py_DECREF(n);
    return out;
}

/* Pickles and copies as a call with every field. */
static PyObject *rq_reduce(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *args = PyTuple_New(RQ_NFIELDS);
    if (args == NULL)
        return NULL;
    for (int i = 0; i < RQ_NFIELDS; i++) {
        PyObject *v = rq_get(self, i);
        if (v == NULL) {
            Py_DECREF(args);
            return NULL;
        }
        Py_INCREF(v);
        PyTuple_SET_ITEM(args, i, v);
    }
    return Py_BuildValue("(ON)", (PyObject *)Py_TYPE(self), args);
}

static PyMemberDef rq_members[] = {
    {"id", T_OBJECT_EX, offsetof(RequestObject, f[0]), 0, NULL},
    {"tokens", T_OBJECT_EX, offsetof(RequestObject, f[1]), 0, NULL},
    {"num_tokens", T_OBJECT_EX, offsetof(RequestObject, f[2]), 0, NULL},
    {"target_rank", T_OBJECT_EX, offsetof(RequestObject, f[3]), 0, NULL},
    {"relax", T_OBJECT_EX, offsetof(RequestObject, f[4]), 0, NULL},
    {"conversation_id", T_OBJECT_EX, offsetof(RequestObject, f[5]), 0, NULL},
    {"lora_id", T_OBJECT_EX, offsetof(RequestObject, f[6]), 0, NULL},
    {"cache_salt", T_OBJECT_EX, offsetof(RequestObject, f[7]), 0, NULL},
    {"max_new_tokens", T_OBJECT_EX, offsetof(RequestObject, f[8]), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef rq_methods[] = {
    {"__reduce__", rq_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot rq_slots[] = {
    {Py_tp_doc, "Request(id, tokens=None, num_tokens=None, target_rank=None, relax=True, "
                "conversation_id=None, lora_id=0, cache_salt=0, max_new_tokens=0)\n--\n\n"
                "One new request (the binding sets the full documentation)."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, rq_init},
    {Py_tp_traverse, rq_traverse},
    {Py_tp_clear, rq_clear},
    {Py_tp_dealloc, rq_dealloc},
    {Py_tp_repr, rq_repr},
    {Py_tp_members, rq_members},
    {Py_tp_methods, rq_methods},
    {0, NULL},
};

static PyType_Spec rq_spec = {
    "adprouter.Request", sizeof(RequestObject), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    rq_slots,
};

/* --- adprouter.trtllm's route_requests: TensorRT-LLM's objects in, its dict out
 *
 * trtllm_route does in one C call what adprouter.trtllm's Python path does
 * per iteration: reads each RequestQueueItem (and its LlmRequest and
 * scheduling and conversation params) as that module's _requests does,
 * packs the rank states whatever their class (by attribute name, as
 * _pack.pack_states), builds the match table from the allgathered
 * [id, match, ...] lists or {id: match} dicts with TensorRT-LLM's dict
 * semantics (ids outside the batch ignored, the last of a repeated id
 * wins, missing ones 0), calls adpr_route with the GIL released, and
 * returns ({rank: [items]}, [items left over]) made of the caller's own item
 * objects. Every value is read through a reference this code holds, so
 * attribute look-ups that run the caller's code (properties, __getattr__)
 * cannot free what is being read; anything beyond the plain case (a
 * conversation id that needs the Python key, a cache salt to digest, a
 * token list that is not a list or tuple, an attribute missing where the
 * Python path would raise, ...) returns None and the Python path runs. */

enum {
    A_ID, A_REQUEST, A_NUM_INPUT, A_INPUT_IDS, A_SCHED, A_DP_RANK, A_DP_RELAX, A_SUBAGENT, A_CONV_PARAMS,
    A_CONV_ID, A_LORA, A_TASK, A_SALT, A_MAX_TOKENS, A_RANK, A_REQS, A_TOKENS, A_CAPACITY, A_FREE, A_PRESSURE,
    A_PENDING, A_EVICTABLE, A_NAMES
};
static const char *const attr_names[A_NAMES] = {
    "id", "request", "num_input_tokens", "input_token_ids", "py_scheduling_params", "attention_dp_rank",
    "attention_dp_relax", "subagent_affinity_id", "py_conversation_params", "conversation_id", "lora_config",
    "task_id", "cache_salt", "max_tokens", "rank", "num_active_requests", "num_active_tokens", "kv_capacity_tokens",
    "free_kv_tokens", "memory_pressure", "pending_kv_tokens", "evictable_kv_tokens",
};
static PyObject *attr_name[A_NAMES]; /* interned at import */

/* trtllm_route's flags: what the policy reads. */
#define T_CONVERSATIONS 1 /* the conversation key */
#define T_SCOPES 2        /* the LoRA task and cache salt (prefix index) */
#define T_COUNTS 4        /* the token count (every policy but the plain
                             conversation router reads it) */
#define T_OUTPUTS 8       /* the executor request's max_tokens (the output
                             the KV room reserves, where ranks report KV) */

/* Whether o is an id this path compares by value: an exact int or a bool,
 * whose hashing and comparison in the Python path run no Python code. */
static inline int plain_id(PyObject *o) { return PyLong_CheckExact(o) || PyBool_Check(o); }

/* getattr(o, name, None): a new reference, or NULL with no error when the
 * attribute is absent; NULL with an error set for any other failure. */
static PyObject *optional_attr(PyObject *o, int name)
{
    PyObject *v = NULL;
#if PY_VERSION_HEX >= 0x030D0000
    if (PyObject_GetOptionalAttr(o, attr_name[name], &v) < 0)
        return NULL;
#else
    if (_PyObject_LookupAttr(o, attr_name[name], &v) < 0)
        return NULL;
#endif
    return v;
}

/* o.name as the Python path reads it (AttributeError there): a new
 * reference, or NULL with FALLBACK's meaning (no error set). */
static PyObject *required_attr(PyObject *o, int name)
{
    PyObject *v = PyObject_GetAttr(o, attr_name[name]);
    if (v == NULL)
        PyErr_Clear();
    return v;
}

/* The conversation key of a request whose scheduling params are sp (may be
 * NULL) as adprouter.trtllm's _requests reads it: a non-empty str
 * subagent_affinity_id, else py_conversation_params.conversation_id. A new
 * reference to an exact str the library takes as it is (adprouter.trtllm's
 * _conversation_key leaves it unchanged: non-empty, no leading NUL, at most
 * 256 characters, so at most 1024 UTF-8 bytes) or to None; NULL for
 * FALLBACK (no error set). */
static PyObject *conversation_key(PyObject *req, PyObject *sp)
{
    PyObject *cid = NULL;
    if (sp != NULL) {
        PyObject *sub = optional_attr(sp, A_SUBAGENT);
        if (sub == NULL && PyErr_Occurred()) {
            PyErr_Clear();
            return NULL;
        }
        if (sub != NULL && PyUnicode_Check(sub) && PyUnicode_GET_LENGTH(sub) > 0)
            cid = sub;
        else
            Py_XDECREF(sub);
    }
    if (cid == NULL) {
        PyObject *cp = optional_attr(req, A_CONV_PARAMS);
        if (cp == NULL) {
            if (PyErr_Occurred()) {
                PyErr_Clear();
                return NULL;
            }
            Py_RETURN_NONE;
        }
        if (cp == Py_None) {
            return cp;
        }
        cid = required_attr(cp, A_CONV_ID);
        Py_DECREF(cp);
        if (cid == NULL)
            return NULL;
        if (cid == Py_None)
            return cid;
    }
    if (PyUnicode_CheckExact(cid) && PyUnicode_GET_LENGTH(cid) > 0 && PyUnicode_GET_LENGTH(cid) <= 256 &&
        PyUnicode_READ_CHAR(cid, 0) != 0)
        return cid;
    Py_DECREF(cid);
    return NULL;
}

/* A LoRA task id or cache salt as the index's uint64 scope: task & (2^64-1)
 * for an int (bools included), 0 for None or anything else (_requests); a
 * salt must be None or an int but not a bool (others are digested in
 * Python: FALLBACK). */
static int scope_value(PyObject *v, int salt, uint64_t *out)
{
    *out = 0;
    if (v == NULL || v == Py_None)
        return 0;
    if (!PyLong_Check(v) || (salt && PyBool_Check(v)))
        return salt ? FALLBACK : 0;
    *out = PyLong_AsUnsignedLongLongMask(v);
    if (*out == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return FALLBACK;
    }
    return 0;
}

/* Packs RequestQueueItem item into *out and the token and text buffers as
 * adprouter.trtllm's _requests builds its Request and _pack packs it
 * (through pack_fields, which both paths' packing shares). limit: the
 * tokens to send (0: none, < 0: all). Returns 0, FALLBACK or -1. */
static int pack_item(PyObject *item, Py_ssize_t limit, int flags, adpr_request *out, growbuf *tok, growbuf *text,
                     deferq *dq)
{
    enum { K = R_SLOTS };
    PyObject *f[K] = {NULL}, *req = NULL, *sp = NULL, *toks = NULL;
    uint64_t lora = 0, salt = 0;
    int rc = FALLBACK;
    if ((f[R_ID] = required_attr(item, A_ID)) == NULL || !plain_id(f[R_ID]) ||
        (req = required_attr(item, A_REQUEST)) == NULL)
        goto done; /* an id whose hashing runs Python code decodes in Python */
    Py_INCREF(Py_None);
    f[R_TARGET] = Py_None;
    Py_INCREF(Py_True);
    f[R_RELAX] = Py_True;
    Py_INCREF(Py_None);
    f[R_CONV] = Py_None;
    if (req == Py_None) { /* no request: 0 tokens */
        Py_INCREF(Py_None);
        f[R_TOKENS] = Py_None;
        Py_INCREF(rq_zero);
        f[R_NUM_TOKENS] = rq_zero;
        rc = pack_fields(f, limit, out, tok, text, dq);
        goto done;
    }
    /* The token count: num_input_tokens when an int, else the list's
     * length; 0 where the policy reads none (as TensorRT-LLM's conversation
     * router, the plain one reads neither). */
    PyObject *n = NULL;
    if (!(flags & T_COUNTS)) {
        Py_INCREF(rq_zero);
        n = rq_zero;
    } else if ((n = optional_attr(req, A_NUM_INPUT)) == NULL && PyErr_Occurred()) {
        goto error_clear;
    }
    if (limit != 0 || ((flags & T_COUNTS) && (n == NULL || !PyLong_Check(n)))) {
        toks = optional_attr(req, A_INPUT_IDS);
        if (toks == NULL && PyErr_Occurred()) {
            Py_XDECREF(n);
            goto error_clear;
        }
    }
    if (n == NULL || !PyLong_Check(n)) {
        Py_XDECREF(n);
        n = NULL;
        if (toks != NULL && !plain_seq(toks))
            goto done; /* len() of something else, or of None (a TypeError there) */
        n = PyLong_FromSsize_t(toks == NULL ? 0 : PySequence_Fast_GET_SIZE(toks));
        if (n == NULL) {
            rc = -1;
            goto done;
        }
    }
    f[R_NUM_TOKENS] = n;
    if (limit != 0) {
        if (toks == NULL || toks == Py_None) {
            Py_XDECREF(toks);
            toks = PyTuple_New(0);
            if (toks == NULL) {
                rc = -1;
                goto done;
            }
        } else if (!plain_seq(toks)) {
            goto done; /* list(toks) there */
        }
        Py_INCREF(toks);
        f[R_TOKENS] = toks;
    } else {
        Py_INCREF(Py_None);
        f[R_TOKENS] = Py_None;
    }
    sp = optional_attr(req, A_SCHED);
    if (sp == NULL && PyErr_Occurred())
        goto error_clear;
    if (sp == Py_None)
        Py_CLEAR(sp);
    if (sp != NULL) {
        PyObject *target = required_attr(sp, A_DP_RANK), *relax = target ? required_attr(sp, A_DP_RELAX) : NULL;
        if (relax == NULL) {
            Py_XDECREF(target);
            goto done;
        }
        Py_SETREF(f[R_TARGET], target);
        if (relax == Py_None)
            Py_DECREF(relax); /* None is relaxed: f keeps True */
        else
            Py_SETREF(f[R_RELAX], relax);
    }
    if (flags & T_CONVERSATIONS) {
        PyObject *key = conversation_key(req, sp);
        if (key == NULL)
            goto done;
        Py_SETREF(f[R_CONV], key);
    }
    if (flags & T_SCOPES) {
        PyObject *cfg = optional_attr(req, A_LORA), *task = NULL, *s = NULL;
        if (cfg == NULL && PyErr_Occurred())
            goto error_clear;
        if (cfg != NULL && cfg != Py_None && (task = optional_attr(cfg, A_TASK)) == NULL && PyErr_Occurred()) {
            Py_DECREF(cfg);
            goto error_clear;
        }
        Py_XDECREF(cfg);
        if ((s = optional_attr(req, A_SALT)) == NULL && PyErr_Occurred()) {
            Py_XDECREF(task);
            goto error_clear;
        }
        int bad = scope_value(task, 0, &lora) || scope_value(s, 1, &salt);
        Py_XDECREF(task);
        Py_XDECREF(s);
        if (bad)
            goto done;
    }
    if (flags & T_OUTPUTS) { /* max_tokens: an int, or None or absent for 0; else the Python path's error */
        PyObject *m = optional_attr(req, A_MAX_TOKENS);
        if (m == NULL && PyErr_Occurred())
            goto error_clear;
        if (m == Py_None)
            Py_CLEAR(m);
        if (m != NULL && !PyLong_Check(m)) {
            Py_DECREF(m);
            goto done;
        }
        f[R_MAX_NEW] = m;
    }
    rc = pack_fields(f, limit, out, tok, text, dq); /* f[R_LORA], f[R_SALT] NULL: set below */
    if (rc == 0) {
        out->lora_id = lora;
        out->cache_salt = salt;
    }
    goto done;
error_clear:
    PyErr_Clear();
    rc = FALLBACK;
done:
    for (int k = 0; k < K; k++)
        Py_XDECREF(f[k]);
    Py_XDECREF(req);
    Py_XDECREF(sp);
    Py_XDECREF(toks);
    return rc;
}

/* Packs rank state s, of any class, as _pack.pack_states does: rank,
 * num_active_requests and num_active_tokens, and kv_capacity_tokens,
 * free_kv_tokens, memory_pressure, pending_kv_tokens and
 * evictable_kv_tokens where present (the last two None or absent: not
 * reported). 0 or FALLBACK. */
static int pack_any_state(PyObject *s, adpr_rank_state *out)
{
    enum { N = A_EVICTABLE - A_RANK + 1, P = A_PRESSURE - A_RANK };
    PyObject *v[N] = {NULL};
    int rc = FALLBACK;
    long long x[N] = {0};
    static const long long lo[N] = {INT32_MIN, INT32_MIN, INT64_MIN, INT64_MIN, INT64_MIN, 0, INT64_MIN, INT64_MIN};
    static const long long hi[N] = {INT32_MAX, INT32_MAX, INT64_MAX, INT64_MAX, INT64_MAX, 0, INT64_MAX, INT64_MAX};
    uint32_t flags = 0;
    for (int k = 0; k < N; k++) {
        v[k] = k < 3 ? required_attr(s, A_RANK + k) : optional_attr(s, A_RANK + k);
        if (v[k] == NULL && (k < 3 || PyErr_Occurred())) {
            PyErr_Clear();
            goto done;
        }
        if (k > P && v[k] == Py_None)
            Py_CLEAR(v[k]); /* not reported */
        if (k > P && v[k] != NULL)
            flags |= k == P + 1 ? ADPR_RANK_PENDING_KV : ADPR_RANK_EVICTABLE_KV;
    }
    for (int k = 0; k < N; k++)
        if (k != P && v[k] != NULL && read_int(v[k], lo[k], hi[k], &x[k]))
            goto done;
    int pressure = 0;
    if (v[P] != NULL && (pressure = PyObject_IsTrue(v[P])) < 0) {
        PyErr_Clear();
        goto done;
    }
    adpr_rank_state r = {(int32_t)x[0], (int32_t)x[1], x[2], x[3], x[4], (uint32_t)pressure | flags, 0,
                         x[P + 1], x[P + 2]};
    *out = r;
    rc = 0;
done:
    for (int k = 0; k < N; k++)
        Py_XDECREF(v[k]);
    return rc;
}

/* The position of id in m (idmap_init over the packed requests), or -1. */
static Py_ssize_t idmap_find(const idmap *m, uint64_t id)
{
    for (uint64_t slot = (id * IDMAP_K) >> m->shift; m->pos[slot] != 0; slot = (slot + 1) & m->mask)
        if (m->keys[slot] == id)
            return m->pos[slot] - 1;
    return -1;
}

/* Rank r's column of table[nr * ns] from row: an [id, match, ...] list or
 * tuple (an odd last value ignored, as zip does) or an {id: match} dict,
 * with the dict semantics of TensorRT-LLM's parse: ids outside the batch
 * ignored, the last of a repeated id wins. Ids and matches must be ints
 * (read without running Python code: no borrowed item can be freed while
 * it is read); anything else is FALLBACK. The pairs usually come in batch
 * order: compared first, looked up from the first that is not. */
static int fill_lenient(PyObject *row, const adpr_request *reqs, const idmap *m, Py_ssize_t nr, Py_ssize_t ns,
                        Py_ssize_t r, int32_t *table)
{
    uint64_t id;
    if (PyDict_CheckExact(row)) {
        Py_ssize_t it = 0;
        PyObject *key, *value;
        while (PyDict_Next(row, &it, &key, &value)) {
            if (!plain_id(key) || read_u64(key, &id))
                return FALLBACK; /* a key that may equal an id in Python only (5.0 == 5, an int subclass) */
            Py_ssize_t at = idmap_find(m, id);
            if (at >= 0 && read_match(value, &table[at * ns + r]))
                return FALLBACK;
        }
        return 0;
    }
    if (!plain_seq(row))
        return FALLBACK;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(row) / 2;
    PyObject **items = PySequence_Fast_ITEMS(row);
    for (Py_ssize_t k = 0; k < n; k++) {
        if (!plain_id(items[2 * k]) || read_u64(items[2 * k], &id))
            return FALLBACK;
        Py_ssize_t at = k < nr && reqs[k].id == id ? k : idmap_find(m, id);
        if (at >= 0 && read_match(items[2 * k + 1], &table[at * ns + r]))
            return FALLBACK;
    }
    return 0;
}

/* A match index: the allgathered [id, match, ...] lists of every rank read
 * once, when adprouter.trtllm's gather_prefix_matches receives them, into a
 * table keyed by request id (as TensorRT-LLM parses them into dicts there,
 * rather than in route_requests). trtllm_route then copies each request's
 * row instead of reading every rank's list. Immutable once built, held in a
 * capsule only this module can make or read. */
#define MATCH_INDEX "adprouter._speedups.match_index"
typedef struct {
    Py_ssize_t nrows;  /* rank rows */
    Py_ssize_t nids;   /* distinct ids */
    Py_ssize_t capids; /* rows of m allocated */
    idmap ids;         /* id -> its row of m (refs unused) */
    int32_t *m;        /* nids x nrows matches, id-major */
} matchindex;

static void matchindex_free(matchindex *x)
{
    if (x == NULL)
        return;
    PyMem_Free(x->ids.keys);
    PyMem_Free(x->ids.pos);
    PyMem_Free(x->m);
    PyMem_Free(x);
}

static void matchindex_capsule_free(PyObject *cap)
{
    matchindex_free(PyCapsule_GetPointer(cap, MATCH_INDEX));
}

/* Sizes x's id table to size slots (a power of two, > 2 * nids), moving its
 * ids. 0 or -1 (MemoryError set). */
static int matchindex_rehash(matchindex *x, Py_ssize_t size)
{
    idmap *t = &x->ids;
    uint64_t *keys = PyMem_Malloc(size * sizeof *keys);
    int32_t *pos = PyMem_Calloc(size, sizeof *pos);
    if (keys == NULL || pos == NULL) {
        PyMem_Free(keys);
        PyMem_Free(pos);
        PyErr_NoMemory();
        return -1;
    }
    int shift = 64;
    for (Py_ssize_t n = size; n > 1; n >>= 1)
        shift--;
    for (uint64_t i = 0; t->pos != NULL && i <= t->mask; i++)
        if (t->pos[i] != 0) {
            uint64_t slot = (t->keys[i] * IDMAP_K) >> shift;
            while (pos[slot] != 0)
                slot = (slot + 1) & (uint64_t)(size - 1);
            keys[slot] = t->keys[i];
            pos[slot] = t->pos[i];
        }
    PyMem_Free(t->keys);
    PyMem_Free(t->pos);
    t->keys = keys;
    t->pos = pos;
    t->mask = (uint64_t)size - 1;
    t->shift = shift;
    return 0;
}

/* id's row of x's matches, added (zeroed) if new; -1 with MemoryError set. */
static Py_ssize_t matchindex_row(matchindex *x, uint64_t id)
{
    Py_ssize_t at = idmap_find(&x->ids, id);
    if (at >= 0)
        return at;
    if (x->nids >= INT32_MAX - 1 || x->nids + 1 > PY_SSIZE_T_MAX / 4 / (x->nrows ? x->nrows : 1)) {
        PyErr_NoMemory();
        return -1;
    }
    if (2 * (x->nids + 1) > (Py_ssize_t)x->ids.mask + 1 && matchindex_rehash(x, 2 * ((Py_ssize_t)x->ids.mask + 1)) < 0)
        return -1;
    if (x->nids == x->capids) {
        Py_ssize_t cap = x->capids ? 2 * x->capids : 64;
        int32_t *m = PyMem_Realloc(x->m, (size_t)cap * x->nrows * sizeof *m + 1);
        if (m == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        x->m = m;
        x->capids = cap;
    }
    at = x->nids++;
    memset(&x->m[at * x->nrows], 0, x->nrows * sizeof *x->m);
    idmap *t = &x->ids;
    uint64_t slot = (id * IDMAP_K) >> t->shift;
    while (t->pos[slot] != 0)
        slot = (slot + 1) & t->mask;
    t->keys[slot] = id;
    t->pos[slot] = (int32_t)(at + 1);
    return at;
}

/* match_index(rows) -> a match index of rows (one [id, match, ...] list or
 * tuple per rank, an odd last value ignored, the last of a repeated id
 * winning), or None where trtllm_route must read the rows themselves: a row
 * of another type, an id or a match it would not read (see fill_lenient). */
static PyObject *match_index(PyObject *Py_UNUSED(self), PyObject *rows_arg)
{
    if (!plain_seq(rows_arg))
        Py_RETURN_NONE;
    PyObject *rows = PySequence_Tuple(rows_arg); /* holds every row read below */
    if (rows == NULL)
        return NULL;
    Py_ssize_t nrows = PyTuple_GET_SIZE(rows), most = 0;
    for (Py_ssize_t r = 0; r < nrows; r++) {
        PyObject *row = PyTuple_GET_ITEM(rows, r);
        if (!plain_seq(row)) {
            Py_DECREF(rows);
            Py_RETURN_NONE;
        }
        most = Py_MAX(most, PySequence_Fast_GET_SIZE(row) / 2);
    }
    matchindex *x = PyMem_Calloc(1, sizeof *x);
    PyObject *out = NULL;
    if (x == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    x->nrows = nrows;
    Py_ssize_t size = 16;
    while (size < 2 * most + 2 && size < ((Py_ssize_t)1 << 40))
        size *= 2;
    if (matchindex_rehash(x, size) < 0)
        goto done;
    /* Reading an exact int, a bool or an int subclass's value runs no
     * Python code, so no row can change while it is read. */
    for (Py_ssize_t r = 0; r < nrows; r++) {
        PyObject *row = PyTuple_GET_ITEM(rows, r);
        Py_ssize_t n = PySequence_Fast_GET_SIZE(row) / 2;
        PyObject **items = PySequence_Fast_ITEMS(row);
        for (Py_ssize_t k = 0; k < n; k++) {
            uint64_t id;
            int32_t v;
            if (!plain_id(items[2 * k]) || read_u64(items[2 * k], &id) || read_match(items[2 * k + 1], &v)) {
                out = Py_None;
                Py_INCREF(out);
                goto done;
            }
            Py_ssize_t at = matchindex_row(x, id);
            if (at < 0)
                goto done;
            x->m[at * nrows + r] = v;
        }
    }
    out = PyCapsule_New(x, MATCH_INDEX, matchindex_capsule_free);
    if (out != NULL)
        x = NULL; /* the capsule owns it */
done:
    matchindex_free(x);
    Py_DECREF(rows);
    return out;
}

/* table[nr * ns] from x for the batch reqs: each request's row, ranks past
 * x's rows matching nothing. */
static void fill_indexed(const matchindex *x, const adpr_request *reqs, Py_ssize_t nr, Py_ssize_t ns, int32_t *table)
{
    Py_ssize_t w = Py_MIN(ns, x->nrows);
    for (Py_ssize_t i = 0; i < nr; i++) {
        Py_ssize_t at = idmap_find(&x->ids, reqs[i].id);
        if (at >= 0)
            memcpy(&table[i * ns], &x->m[at * x->nrows], w * sizeof *table);
    }
}

/* {rank: [items placed on it, in order]} for ranks 0..ns-1 and the items
 * left over in input order, from adpr_route's outputs; items[i] is the
 * object request i was packed from. 0 or -1 (error set). */
static int decode_items(PyObject **items, const idmap *m, const int32_t *ranks,
                        const uint64_t *order, const int32_t *off, Py_ssize_t nr, Py_ssize_t ns, PyObject **out,
                        PyObject **left)
{
    *out = PyDict_New();
    *left = PyList_New(nr - off[ns]);
    for (Py_ssize_t r = 0; *out != NULL && *left != NULL && r < ns; r++) {
        PyObject *lst = PyList_New(off[r + 1] - off[r]), *key = NULL;
        for (Py_ssize_t k = off[r]; lst != NULL && k < off[r + 1]; k++) {
            Py_ssize_t at = idmap_find(m, order[k]);
            if (at < 0) {
                PyErr_SetString(PyExc_SystemError, "adpr_route placed an id that is not in the batch");
                Py_CLEAR(lst);
                break;
            }
            Py_INCREF(items[at]);
            PyList_SET_ITEM(lst, k - off[r], items[at]);
        }
        if (lst == NULL || (key = PyLong_FromSsize_t(r)) == NULL || PyDict_SetItem(*out, key, lst) < 0)
            Py_CLEAR(*out);
        Py_XDECREF(key);
        Py_XDECREF(lst);
    }
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; *out != NULL && *left != NULL && i < nr; i++) {
        if (ranks[i] >= 0)
            continue;
        if (k >= nr - off[ns]) {
            PyErr_SetString(PyExc_SystemError, "adpr_route's unplaced requests disagree with its offsets");
            Py_CLEAR(*left);
            break;
        }
        Py_INCREF(items[i]);
        PyList_SET_ITEM(*left, k++, items[i]);
    }
    if (*out == NULL || *left == NULL) {
        Py_CLEAR(*out);
        Py_CLEAR(*left);
        return -1;
    }
    return 0;
}

/* trtllm_route(adpr_route address, handle, states, items, send_tokens,
 * flags, match_rows, max_num_active_requests, errbuf) -> (status, expected,
 * {rank: [items]}, [items left over]) (the last two None when status is not
 * ADPR_OK, the message then in errbuf), or None, having called nothing,
 * where adprouter.trtllm's Python path must run. match_rows: None (no
 * matches), a match index (match_index) or one entry per rank (fewer: the
 * rest match nothing) as fill_lenient reads them. flags: T_CONVERSATIONS,
 * T_SCOPES, T_COUNTS, T_OUTPUTS. The caller has checked the handle and
 * max_num_active_requests. */
static PyObject *trtllm_route(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "trtllm_route() takes 9 arguments");
        return NULL;
    }
    PyObject *states = args[2], *items_arg = args[3], *match_rows = args[6];
    void *fn = PyLong_AsVoidPtr(args[0]);
    unsigned long long handle = PyLong_AsUnsignedLongLong(args[1]);
    Py_ssize_t limit;
    long flags = PyLong_AsLong(args[5]), maxn = PyLong_AsLong(args[7]);
    if (PyErr_Occurred() || send_limit(args[4], &limit) < 0)
        return NULL;
    const matchindex *indexed = NULL;
    if (PyCapsule_IsValid(match_rows, MATCH_INDEX)) {
        indexed = PyCapsule_GetPointer(match_rows, MATCH_INDEX);
        match_rows = Py_None; /* args holds the capsule for the call */
    }
    if (fn == NULL || !plain_seq(states) || !plain_seq(items_arg) ||
        (match_rows != Py_None && !plain_seq(match_rows)))
        Py_RETURN_NONE;
    /* Tuples of the caller's sequences (see route()): they hold every
     * object read below, whatever code runs meanwhile. */
    PyObject *sts = PySequence_Tuple(states), *its = sts ? PySequence_Tuple(items_arg) : NULL;
    PyObject *rows = its && match_rows != Py_None ? PySequence_Tuple(match_rows) : NULL;
    if (its == NULL || (match_rows != Py_None && rows == NULL)) {
        Py_XDECREF(sts);
        Py_XDECREF(its);
        return NULL;
    }
    Py_ssize_t ns = PyTuple_GET_SIZE(sts), nr = PyTuple_GET_SIZE(its);
    if (ns > INT32_MAX || nr > INT32_MAX || maxn < 1 || maxn > INT32_MAX) {
        Py_DECREF(sts);
        Py_DECREF(its);
        Py_XDECREF(rows);
        Py_RETURN_NONE;
    }
    PyObject **items = &PyTuple_GET_ITEM(its, 0);
    Py_buffer err = {0};
    scratch *sc = scratch_take();
    if (sc == NULL) {
        Py_DECREF(sts);
        Py_DECREF(its);
        Py_XDECREF(rows);
        return NULL;
    }
    routebufs rb;
    deferq dq = {NULL, 0};
    int rc = route_buffers(sc, ns, nr, (rows != NULL || indexed != NULL) && nr > 0, &rb);
    if (rc == 0 && (dq.d = scratch_buf(sc, SB_DEFER, nr * sizeof(deferred))) == NULL)
        rc = -1; /* MemoryError set */
    adpr_rank_state *st = rb.st;
    adpr_request *reqs = rb.reqs;
    int32_t *ranks = rb.ranks, *offsets = rb.offsets, *table = rb.table;
    uint64_t *order = rb.order;
    growbuf *tok = &sc->tok, *text = &sc->text;
    idmap m = {NULL};
    PyObject *result = NULL;
    int have_err = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < ns; i++)
        rc = pack_any_state(PyTuple_GET_ITEM(sts, i), &st[i]);
    for (Py_ssize_t i = 0; rc == 0 && i < nr; i++)
        rc = pack_item(items[i], limit, (int)flags, &reqs[i], tok, text, &dq);
    if (rc == 0)
        rc = read_deferred(&dq, tok);
    if (rc == 0 && idmap_init(&m, reqs, nr, NULL, sc) < 0)
        rc = -1;
    /* A repeated id: the Python path raises the library's error for it. */
    for (Py_ssize_t i = 0; rc == 0 && i < nr; i++)
        if (idmap_find(&m, reqs[i].id) != i)
            rc = FALLBACK;
    if (rc == 0 && table != NULL && indexed != NULL)
        fill_indexed(indexed, reqs, nr, ns, table);
    else if (rc == 0 && table != NULL)
        for (Py_ssize_t r = 0; rc == 0 && r < ns && r < PyTuple_GET_SIZE(rows); r++)
            rc = fill_lenient(PyTuple_GET_ITEM(rows, r), reqs, &m, nr, ns, r, table);
    if (rc == 0 && (rc = out_buffer(args[8], 1, &err)) == 0)
        have_err = 1;
    if (rc == 0) {
        adpr_batch batch = {
            ns ? st : NULL, (int32_t)ns, (int32_t)nr, nr ? reqs : NULL,
            tok->len ? (const int32_t *)tok->p : NULL, tok->len / 4,
            text->len ? text->p : NULL, text->len,
            table, (int32_t)maxn,
        };
        adpr_route_result out = {ranks, order, offsets, 0, 0};
        int32_t status;
        Py_BEGIN_ALLOW_THREADS
        status = ((adpr_route_fn)fn)((uint64_t)handle, &batch, &out, err.buf, (size_t)err.len);
        Py_END_ALLOW_THREADS
        PyObject *assign = NULL, *left = NULL;
        if (status != ADPR_OK)
            result = Py_BuildValue("(iiOO)", (int)status, (int)out.expected, Py_None, Py_None);
        else if (!offsets_ok(offsets, ns, nr))
            PyErr_SetString(PyExc_SystemError, "adpr_route wrote rank offsets outside its result");
        else if (decode_items(items, &m, ranks, order, offsets, nr, ns, &assign, &left) == 0)
            result = Py_BuildValue("(iiNN)", (int)status, (int)out.expected, assign, left); /* N steals */
    } else if (rc == FALLBACK) {
        result = Py_None;
        Py_INCREF(result);
    }
    if (have_err)
        PyBuffer_Release(&err);
    deferq_release(&dq);
    scratch_give(sc);
    Py_DECREF(sts);
    Py_DECREF(its);
    Py_XDECREF(rows);
    return result;
}

/* probe_items(items, probe) -> (ids, [id, match, id, match, ...]): the
 * loop of adprouter.trtllm's gather_prefix_matches in C, step for step as
 * the Python loop reads each item (item.id, item.request, its
 * input_token_ids or [], prompt[:-1] when longer than 1, lora_config's
 * task_id, cache_salt) and calls probe(head, task, cache_salt=salt), so
 * that it calls the caller's code in the same order with the same values
 * and raises what the Python loop would raise. items must be a list or
 * tuple (else None: the Python loop runs). */
static PyObject *probe_items(PyObject *Py_UNUSED(self), PyObject *args)
{
    static PyObject *kwnames, *tail;
    PyObject *items_arg, *probe;
    if (!PyArg_ParseTuple(args, "OO", &items_arg, &probe))
        return NULL;
    if (!plain_seq(items_arg))
        Py_RETURN_NONE;
    if (kwnames == NULL && (kwnames = Py_BuildValue("(s)", "cache_salt")) == NULL)
        return NULL;
    if (tail == NULL) { /* slice(None, -1): what prompt[:-1] passes to __getitem__ */
        PyObject *minus1 = PyLong_FromLong(-1);
        tail = minus1 ? PySlice_New(NULL, minus1, NULL) : NULL;
        Py_XDECREF(minus1);
        if (tail == NULL)
            return NULL;
    }
    PyObject *its = PySequence_Tuple(items_arg);
    if (its == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(its);
    PyObject *ids = PyList_New(n), *flat = ids ? PyList_New(2 * n) : NULL;
    for (Py_ssize_t i = 0; flat != NULL && i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(its, i), *id = PyObject_GetAttr(item, attr_name[A_ID]), *req = NULL,
                 *toks = NULL, *head = NULL, *lora = NULL, *task = NULL, *salt = NULL, *len = NULL;
        int ok = 0;
        if (id == NULL || (req = PyObject_GetAttr(item, attr_name[A_REQUEST])) == NULL)
            goto next;
        if (req == Py_None) {
            Py_INCREF(rq_zero);
            len = rq_zero;
            ok = 1;
            goto next;
        }
        if ((toks = optional_attr(req, A_INPUT_IDS)) == NULL && PyErr_Occurred())
            goto next;
        int truth = toks == NULL ? 0 : PyObject_IsTrue(toks);
        if (truth < 0)
            goto next;
        Py_ssize_t size = 0;
        if (truth && (size = PyObject_Size(toks)) < 0)
            goto next;
        head = size > 1 ? PyObject_GetItem(toks, tail) : PyList_New(0);
        if (head == NULL || ((lora = optional_attr(req, A_LORA)) == NULL && PyErr_Occurred()))
            goto next;
        if (lora != NULL && lora != Py_None) {
            if ((task = PyObject_GetAttr(lora, attr_name[A_TASK])) == NULL)
                goto next;
        } else {
            Py_INCREF(Py_None);
            task = Py_None;
        }
        if ((salt = optional_attr(req, A_SALT)) == NULL) {
            if (PyErr_Occurred())
                goto next;
            Py_INCREF(Py_None);
            salt = Py_None;
        }
        PyObject *argv[3] = {head, task, salt};
        len = PyObject_Vectorcall(probe, argv, 2, kwnames);
        ok = len != NULL;
    next:
        if (ok) {
            Py_INCREF(id);
            PyList_SET_ITEM(ids, i, id);
            PyList_SET_ITEM(flat, 2 * i, id);
            PyList_SET_ITEM(flat, 2 * i + 1, len);
        } else {
            Py_XDECREF(len);
            Py_CLEAR(flat);
        }
        Py_XDECREF(req);
        Py_XDECREF(toks);
        Py_XDECREF(head);
        Py_XDECREF(lora);
        Py_XDECREF(task);
        Py_XDECREF(salt);
        if (!ok)
            Py_XDECREF(id);
    }
    Py_DECREF(its);
    if (flat == NULL) {
        Py_XDECREF(ids);
        return NULL;
    }
    return Py_BuildValue("(NN)", ids, flat);
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(Request, request_slots, RankState, state_slots): the slot layout to read."},
    {"pack_requests", pack_requests, METH_VARARGS,
     "pack_requests(requests, send_tokens) -> (adpr_request bytes, int32 token bytes, token count, "
     "conversation bytes), or None where the Python path must run."},
    {"pack_states", pack_states, METH_O, "pack_states(states) -> adpr_rank_state bytes, or None."},
    {"match_table", match_table, METH_VARARGS,
     "match_table(match_lens, requests, pairs) -> int32 bytes, row-major by request, or None."},
    {"assignment", assignment, METH_VARARGS,
     "assignment(order, offsets) -> {rank: [ids]} for every rank, or None."},
    {"trtllm_route", (PyCFunction)(void (*)(void))trtllm_route, METH_FASTCALL,
     "trtllm_route(adpr_route address, handle, states, items, send_tokens, flags, match_rows, max_active, "
     "errbuf) -> (status, expected, {rank: [items]}, [items left over]), or None where adprouter.trtllm's "
     "Python path must run."},
    {"match_index", match_index, METH_O,
     "match_index(rows) -> the allgathered [id, match, ...] lists read into an index trtllm_route takes as "
     "match_rows, or None where it must read the lists."},
    {"probe_items", probe_items, METH_VARARGS,
     "probe_items(items, probe) -> (ids, [id, match, ...]): adprouter.trtllm's probe loop, or None."},
    {"route", (PyCFunction)(void (*)(void))route, METH_FASTCALL,
     "route(adpr_route address, handle, states, requests, send_tokens, match_lens, pairs, max_active, "
     "errbuf) -> (status, expected, assignment, unassigned, ranks), or None where the Python path must run."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "adprouter._speedups",
    "C versions of adprouter's packing hot path; identical results to the Python code.", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    for (int i = 0; i < RQ_NFIELDS; i++)
        if (rq_interned[i] == NULL && (rq_interned[i] = PyUnicode_InternFromString(rq_names[i])) == NULL)
            goto fail;
    if (rq_zero == NULL && (rq_zero = PyLong_FromLong(0)) == NULL)
        goto fail;
    for (int i = 0; i < A_NAMES; i++)
        if (attr_name[i] == NULL && (attr_name[i] = PyUnicode_InternFromString(attr_names[i])) == NULL)
            goto fail;
    if (PyModule_AddIntConstant(m, "T_CONVERSATIONS", T_CONVERSATIONS) < 0 ||
        PyModule_AddIntConstant(m, "T_SCOPES", T_SCOPES) < 0 || PyModule_AddIntConstant(m, "T_COUNTS", T_COUNTS) < 0 ||
        PyModule_AddIntConstant(m, "T_OUTPUTS", T_OUTPUTS) < 0)
        goto fail;
    PyTypeObject *rq = (PyTypeObject *)PyType_FromSpec(&rq_spec);
    if (rq == NULL)
        goto fail;
    /* Calls of the type itself skip __new__/__init__ (not inherited by
     * subclasses, which construct the ordinary way). */
    rq->tp_vectorcall = rq_vectorcall;
    /* Attribute errors print tp_name, and the class's say 'Request' (its
     * __module__, "adprouter", comes from the spec's name). */
    rq->tp_name = "Request";
    if (PyModule_AddObject(m, "Request", (PyObject *)rq) < 0) {
        Py_DECREF(rq);
        goto fail;
    }
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
