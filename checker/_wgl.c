/* The hot loop of checker.linearizable.search, compiled.
 *
 * Why this exists: the search is a tight loop of list splices, bitset updates
 * and cache probes; in CPython each iteration costs ~100 ns of interpreter
 * overhead, in C a few ns. Everything that decides *what* to search (the event
 * list, the twin prerequisites, the read lists, which ops are pure or needed)
 * is laid out in Python by checker.linearizable._layout and handed over as
 * integer arrays, so this file is only the loop: it makes exactly the moves of
 * the pure-Python loop in the same order, and returns the same verdict, the
 * same step count and the same longest prefix. The pure-Python loop is the
 * reference; tests/checker/test_fast_path.py holds the two together.
 *
 * States are interned: the model's state objects live in a Python list, and the
 * loop sees only their indexes. A transition (op, state) is computed once by
 * calling the op's Python step function and remembered, so a model's own code
 * still defines every transition (any model whose states hash and compare with
 * Python's own == can run here), while the search itself never enters Python
 * again for a pair it has seen. The cache of explored configurations is a hash
 * set of (bitset of linearized ops, state index), with the bitset hashed
 * incrementally (one random word per op, XORed in and out).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    /* layout, by node (0 head, 1..2n events, 2n+1 tail, then read-list heads) */
    Py_ssize_t n_ops, n_nodes, n_all, tail, words;
    int32_t *nxt, *prv, *match, *nid, *prereq, *reads, *rn, *rp;
    uint8_t *need, *pure, *is_eqread;
    int32_t *rhead; Py_ssize_t n_rhead;  /* state index -> read-list head node, or -1 */
    PyObject *steps;                     /* list: node -> step callable (or None) */
    uint8_t *kind;                       /* node -> K_CALL, K_CONST, ... (see step) */
    int32_t *karg, *karg2;               /* K_CONST: the new state; K_CAS: from, to; K_CAS_NOT: a */
    uint8_t *unk;                        /* node -> output unknown: an illegal step is a no-op */
    PyObject *args;                      /* list: node -> K_CONCAT's str suffix (or None) */
    PyObject *intern;                    /* dict: state -> index */
    PyObject *objs;                      /* list: index -> state */
    uint64_t *zob;                       /* per op id: random word for the bitset hash */
    /* search state, kept across run() calls */
    uint64_t *lin; uint64_t lin_hash;
    int32_t state, entry; int arrived, done;
    Py_ssize_t remaining, depth, best;
    int32_t *stk_node, *stk_state, *best_node, *best_state_before; int32_t best_state;
    long long iters;
    /* configuration cache: open addressing on (bitset, state) */
    uint64_t *c_hash; int32_t *c_state; uint64_t *c_bits; Py_ssize_t c_cap, c_len;
    /* transition memo: (state * n_nodes + node) + 1 -> next state (-1 illegal) */
    uint64_t *m_key; int32_t *m_val; Py_ssize_t m_cap, m_len;
} Search;

static void search_free(Search *s) {
    PyMem_Free(s->nxt); PyMem_Free(s->prv); PyMem_Free(s->match); PyMem_Free(s->nid);
    PyMem_Free(s->prereq); PyMem_Free(s->reads); PyMem_Free(s->rn); PyMem_Free(s->rp);
    PyMem_Free(s->need); PyMem_Free(s->pure); PyMem_Free(s->is_eqread); PyMem_Free(s->rhead);
    PyMem_Free(s->zob); PyMem_Free(s->lin); PyMem_Free(s->stk_node); PyMem_Free(s->stk_state);
    PyMem_Free(s->best_node); PyMem_Free(s->best_state_before);
    PyMem_Free(s->c_hash); PyMem_Free(s->c_state); PyMem_Free(s->c_bits);
    PyMem_Free(s->m_key); PyMem_Free(s->m_val);
    PyMem_Free(s->kind); PyMem_Free(s->karg); PyMem_Free(s->karg2); PyMem_Free(s->unk);
    Py_XDECREF(s->steps); Py_XDECREF(s->args); Py_XDECREF(s->intern); Py_XDECREF(s->objs);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* A Python sequence of ints as a new int32 array of exactly `want` items (or any length if want < 0). */
static int32_t *int_array(PyObject *seq, Py_ssize_t want, Py_ssize_t *len_out, const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (want >= 0 && n != want) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd items, got %zd", what, want, n);
        Py_DECREF(fast);
        return NULL;
    }
    int32_t *out = PyMem_Malloc(sizeof(int32_t) * (n ? n : 1));
    if (!out) { Py_DECREF(fast); PyErr_NoMemory(); return NULL; }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        long v = PyLong_AsLong(items[i]);
        if (v == -1 && PyErr_Occurred()) { PyMem_Free(out); Py_DECREF(fast); return NULL; }
        out[i] = (int32_t)v;
    }
    Py_DECREF(fast);
    if (len_out) *len_out = n;
    return out;
}

static uint8_t *byte_array(PyObject *seq, Py_ssize_t want, const char *what) {
    int32_t *tmp = int_array(seq, want, NULL, what);
    if (!tmp) return NULL;
    uint8_t *out = PyMem_Malloc(want ? want : 1);
    if (!out) { PyMem_Free(tmp); PyErr_NoMemory(); return NULL; }
    for (Py_ssize_t i = 0; i < want; i++) out[i] = (uint8_t)(tmp[i] < 0 ? 255 : tmp[i] > 255 ? 255 : tmp[i]);
    PyMem_Free(tmp);
    return out;
}

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t mix_state(int32_t st) {
    uint64_t z = (uint64_t)(uint32_t)st * 0x9E3779B97F4A7C15ULL;
    return z ^ (z >> 29);
}

static int cache_grow(Search *s) {
    Py_ssize_t ncap = s->c_cap ? s->c_cap * 2 : 1024, w = s->words;
    uint64_t *nh = PyMem_Calloc(ncap, sizeof(uint64_t));
    int32_t *ns = PyMem_Malloc(sizeof(int32_t) * ncap);
    uint64_t *nb = PyMem_Malloc(sizeof(uint64_t) * w * ncap);
    if (!nh || !ns || !nb) { PyMem_Free(nh); PyMem_Free(ns); PyMem_Free(nb); PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < ncap; i++) ns[i] = -1;
    for (Py_ssize_t i = 0; i < s->c_cap; i++) {
        if (s->c_state[i] < 0) continue;
        Py_ssize_t j = (Py_ssize_t)(s->c_hash[i] & (uint64_t)(ncap - 1));
        while (ns[j] >= 0) j = (j + 1) & (ncap - 1);
        nh[j] = s->c_hash[i]; ns[j] = s->c_state[i];
        memcpy(nb + j * w, s->c_bits + i * w, sizeof(uint64_t) * w);
    }
    PyMem_Free(s->c_hash); PyMem_Free(s->c_state); PyMem_Free(s->c_bits);
    s->c_hash = nh; s->c_state = ns; s->c_bits = nb; s->c_cap = ncap;
    return 0;
}

/* Add (lin, st) to the cache: 1 if it was new, 0 if already there, -1 on error. */
static int cache_add(Search *s, int32_t st) {
    if ((s->c_len + 1) * 2 > s->c_cap && cache_grow(s) < 0) return -1;
    uint64_t h = s->lin_hash ^ mix_state(st);
    Py_ssize_t w = s->words, mask = s->c_cap - 1, j = (Py_ssize_t)(h & (uint64_t)mask);
    while (s->c_state[j] >= 0) {
        if (s->c_hash[j] == h && s->c_state[j] == st &&
            memcmp(s->c_bits + j * w, s->lin, sizeof(uint64_t) * w) == 0)
            return 0;
        j = (j + 1) & mask;
    }
    s->c_hash[j] = h; s->c_state[j] = st;
    memcpy(s->c_bits + j * w, s->lin, sizeof(uint64_t) * w);
    s->c_len++;
    return 1;
}

static int memo_grow(Search *s) {
    Py_ssize_t ncap = s->m_cap ? s->m_cap * 2 : 256;
    uint64_t *nk = PyMem_Calloc(ncap, sizeof(uint64_t));
    int32_t *nv = PyMem_Malloc(sizeof(int32_t) * ncap);
    if (!nk || !nv) { PyMem_Free(nk); PyMem_Free(nv); PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < s->m_cap; i++) {
        if (!s->m_key[i]) continue;
        uint64_t k = s->m_key[i];
        Py_ssize_t j = (Py_ssize_t)((k * 0x9E3779B97F4A7C15ULL) >> 20) & (ncap - 1);
        while (nk[j]) j = (j + 1) & (ncap - 1);
        nk[j] = k; nv[j] = s->m_val[i];
    }
    PyMem_Free(s->m_key); PyMem_Free(s->m_val);
    s->m_key = nk; s->m_val = nv; s->m_cap = ncap;
    return 0;
}

/* The index of state `ns` (a new reference, stolen), interning it if new; -2 on error. */
static int32_t intern_state(Search *s, PyObject *ns) {
    PyObject *idx = PyDict_GetItemWithError(s->intern, ns);
    if (idx) { Py_DECREF(ns); return (int32_t)PyLong_AsLong(idx); }
    if (PyErr_Occurred()) { Py_DECREF(ns); return -2; }
    Py_ssize_t n = PyList_GET_SIZE(s->objs);
    if (n >= INT32_MAX) { PyErr_SetString(PyExc_OverflowError, "too many states"); Py_DECREF(ns); return -2; }
    PyObject *num = PyLong_FromSsize_t(n);
    if (!num || PyDict_SetItem(s->intern, ns, num) < 0 || PyList_Append(s->objs, ns) < 0) {
        Py_XDECREF(num); Py_DECREF(ns); return -2;
    }
    Py_DECREF(num);
    Py_DECREF(ns);
    return (int32_t)n;
}

enum { K_CALL = 0, K_CONST = 1, K_CONCAT = 2, K_CAS = 3, K_CAS_NOT = 4, K_NOOP = 5, K_LAST = 5 };

/* The state after op `node` from state `st`: its index, -1 if illegal, -2 on error.
 * All kinds but K_CALL are the built-in models' steps (write, append, cas, a failed cas
 * observed, an always-legal read), done here without calling the model; the Python side
 * marks only ops whose step is exactly that (Model.native). */
static int32_t step(Search *s, int32_t node, int32_t st) {
    switch (s->kind[node]) {
    case K_CONST: return s->karg[node];
    case K_NOOP: return st;
    case K_CAS: return st == s->karg[node] ? s->karg2[node] : (s->unk[node] ? st : -1);
    case K_CAS_NOT: return st != s->karg[node] ? st : (s->unk[node] ? st : -1);
    default: break;
    }
    uint64_t k = (uint64_t)st * (uint64_t)s->n_nodes + (uint64_t)node + 1;
    Py_ssize_t mask = s->m_cap - 1, j = 0;
    if (s->m_cap) {
        j = (Py_ssize_t)((k * 0x9E3779B97F4A7C15ULL) >> 20) & mask;
        while (s->m_key[j]) {
            if (s->m_key[j] == k) return s->m_val[j];
            j = (j + 1) & mask;
        }
    }
    int32_t out = -1;
    if (s->kind[node] == K_CONCAT) {
        PyObject *cur = PyList_GET_ITEM(s->objs, st);
        if (!PyUnicode_Check(cur)) {
            PyErr_SetString(PyExc_TypeError, "an append needs a str state");
            return -2;
        }
        PyObject *ns = PyUnicode_Concat(cur, PyList_GET_ITEM(s->args, node));
        if (!ns) return -2;
        out = intern_state(s, ns);
        if (out == -2) return -2;
        goto remember;
    }
    PyObject *fn = PyList_GET_ITEM(s->steps, node);
    PyObject *res = PyObject_CallOneArg(fn, PyList_GET_ITEM(s->objs, st));
    if (!res) return -2;
    if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 2) {
        PyErr_SetString(PyExc_TypeError, "a step function must return (legal, new_state)");
        Py_DECREF(res);
        return -2;
    }
    int ok = PyObject_IsTrue(PyTuple_GET_ITEM(res, 0));
    if (ok < 0) { Py_DECREF(res); return -2; }
    if (ok) {
        PyObject *ns = PyTuple_GET_ITEM(res, 1);
        Py_INCREF(ns);
        out = intern_state(s, ns);
        if (out == -2) { Py_DECREF(res); return -2; }
    }
    Py_DECREF(res);
remember:
    if ((s->m_len + 1) * 2 > s->m_cap) {
        if (memo_grow(s) < 0) return -2;
    }
    mask = s->m_cap - 1;
    j = (Py_ssize_t)((k * 0x9E3779B97F4A7C15ULL) >> 20) & mask;
    while (s->m_key[j]) j = (j + 1) & mask;
    s->m_key[j] = k; s->m_val[j] = out; s->m_len++;
    return out;
}

#define BIT_SET(s, id) do { (s)->lin[(id) >> 6] |= 1ULL << ((id) & 63); (s)->lin_hash ^= (s)->zob[id]; } while (0)
#define BIT_CLR(s, id) do { (s)->lin[(id) >> 6] &= ~(1ULL << ((id) & 63)); (s)->lin_hash ^= (s)->zob[id]; } while (0)
#define BIT_GET(s, id) (((s)->lin[(id) >> 6] >> ((id) & 63)) & 1ULL)

static void push(Search *s, int32_t node, int32_t before) {
    s->stk_node[s->depth] = node;
    s->stk_state[s->depth] = before;
    s->depth++;
    if (s->depth > s->best) {
        /* the stack may have changed anywhere below since the last copy */
        for (Py_ssize_t i = 0; i < s->depth; i++) {
            s->best_node[i] = s->stk_node[i];
            s->best_state_before[i] = s->stk_state[i];
        }
        s->best = s->depth;
        s->best_state = s->state;   /* caller sets s->state to the state after first */
    }
}

static PyObject *finish(Search *s, int valid) {
    s->done = 1;
    if (valid) return Py_BuildValue("(OLO)", Py_True, s->iters, Py_None);
    /* the deepest configuration: (entry id, state index after it), in order */
    Py_ssize_t b = s->best > 0 ? s->best : 0;
    PyObject *out = PyList_New(b);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < b; i++) {
        int32_t after = (i + 1 < b) ? s->best_state_before[i + 1] : s->best_state;
        PyObject *t = Py_BuildValue("(ii)", s->nid[s->best_node[i]], after);
        if (!t) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, i, t);
    }
    return Py_BuildValue("(OLN)", Py_False, s->iters, out);
}

/* Run at most `budget` iterations. None: not finished yet; else (valid, steps, longest). */
static PyObject *search_run(Search *s, PyObject *args) {
    long long budget;
    if (!PyArg_ParseTuple(args, "L", &budget)) return NULL;
    if (s->done) { PyErr_SetString(PyExc_RuntimeError, "search already finished"); return NULL; }
    int32_t *nxt = s->nxt, *prv = s->prv, *match = s->match, *nid = s->nid;
    int32_t *rn = s->rn, *rp = s->rp, *reads = s->reads, *prereq = s->prereq;
    uint8_t *need = s->need, *pure = s->pure, *is_eqread = s->is_eqread;
    int32_t tail = (int32_t)s->tail, entry = s->entry, state = s->state;
    int arrived = s->arrived;
    long long left = budget;
    PyObject *result = NULL;
#define SAVE() do { s->entry = entry; s->state = state; s->arrived = arrived; } while (0)
    while (nxt[0] != tail) {
        if (left-- <= 0) { SAVE(); Py_RETURN_NONE; }
        s->iters++;
        int failed = 0;
        if (arrived) {
            arrived = 0;
            entry = nxt[0];
            int32_t hv = state < s->n_rhead ? s->rhead[state] : -1;
            if (hv >= 0 && rn[hv] != hv) {
                int32_t h = rn[hv], r = entry;
                while (match[r] >= 0) r = nxt[r];
                if (h < r) {
                    /* a legal read may go now: it goes, with no alternative */
                    int32_t id = nid[h];
                    BIT_SET(s, id);
                    int fresh = cache_add(s, state);
                    if (fresh < 0) { SAVE(); return NULL; }
                    if (!fresh) {
                        BIT_CLR(s, id);
                        failed = 1;
                    } else {
                        if (need[h] && !--s->remaining) { SAVE(); return finish(s, 1); }
                        s->state = state;
                        push(s, h, state);
                        int32_t p = rp[h], q = rn[h];
                        rn[p] = q; rp[q] = p;
                        int32_t m = match[h];
                        p = prv[m]; q = nxt[m];
                        nxt[p] = q; prv[q] = p;
                        arrived = 1;
                        continue;
                    }
                }
            }
        }
        if (!failed) {
            int32_t m = match[entry];
            if (m >= 0) {
                if (prereq[entry] >= 0 && !BIT_GET(s, prereq[entry])) { entry = nxt[entry]; continue; }
                int32_t rv = reads[entry], ns;
                if (rv == -1) {
                    ns = step(s, entry, state);
                    if (ns == -2) { SAVE(); return NULL; }
                    if (ns < 0) { entry = nxt[entry]; continue; }
                } else if (state != rv) {
                    entry = nxt[entry];
                    continue;
                } else {
                    ns = state;
                }
                int32_t id = nid[entry];
                BIT_SET(s, id);
                int fresh = cache_add(s, ns);
                if (fresh < 0) { SAVE(); return NULL; }
                if (fresh) {
                    if (need[entry] && !--s->remaining) { SAVE(); return finish(s, 1); }
                    int32_t before = state;
                    state = ns;
                    s->state = state;
                    push(s, entry, before);
                    int32_t p = prv[entry], q = nxt[entry];
                    nxt[p] = q; prv[q] = p;
                    p = prv[m]; q = nxt[m];
                    nxt[p] = q; prv[q] = p;
                    arrived = 1;
                    continue;
                }
                BIT_CLR(s, id);
                if (!pure[entry]) { entry = nxt[entry]; continue; }
                /* a legal read leading to a failed configuration: this one fails too */
            }
        }
        /* backtrack: the current configuration failed */
        for (;;) {
            if (s->depth == 0) { SAVE(); return finish(s, 0); }
            s->depth--;
            entry = s->stk_node[s->depth];
            state = s->stk_state[s->depth];
            if (need[entry]) s->remaining++;
            BIT_CLR(s, nid[entry]);
            int32_t m = match[entry];
            int32_t p = prv[m];
            nxt[p] = m;
            int32_t q = nxt[m];
            prv[q] = m;
            if (is_eqread[entry]) {
                p = rp[entry]; rn[p] = entry;
                q = rn[entry]; rp[q] = entry;
                continue;
            }
            p = prv[entry]; nxt[p] = entry;
            q = nxt[entry]; prv[q] = entry;
            if (!pure[entry]) break;
        }
        entry = nxt[entry];
    }
    SAVE();
    result = finish(s, 1);
    return result;
#undef SAVE
}

/* Check the node arrays and set up the search state; 0, or -1 with an exception set. */
static int search_setup(Search *s, int init, Py_ssize_t remaining) {
    Py_ssize_t nn = s->n_nodes, n_ops = s->n_ops, n_all = s->n_all, n_objs = PyList_GET_SIZE(s->objs);
    if (PyList_GET_SIZE(s->steps) != nn || PyList_GET_SIZE(s->args) != nn) {
        PyErr_SetString(PyExc_ValueError, "steps and args: one per node");
        return -1;
    }
    for (Py_ssize_t i = 0; i < nn; i++) {
        if (s->nxt[i] < 0 || s->nxt[i] >= nn || s->prv[i] < 0 || s->prv[i] >= nn || s->match[i] >= nn ||
            s->nid[i] < 0 || s->nid[i] >= (n_ops ? n_ops : 1) || s->prereq[i] >= n_ops ||
            s->reads[i] >= n_objs) {
            PyErr_SetString(PyExc_ValueError, "layout index out of range");
            return -1;
        }
        uint8_t k = s->kind[i];
        if (s->match[i] >= 0 && s->reads[i] == -1 && k == K_CALL &&
            !PyCallable_Check(PyList_GET_ITEM(s->steps, i))) {
            PyErr_SetString(PyExc_ValueError, "a call node needs a step function");
            return -1;
        }
        if (k > K_LAST || (k == K_CONCAT && !PyUnicode_Check(PyList_GET_ITEM(s->args, i))) ||
            ((k == K_CONST || k == K_CAS || k == K_CAS_NOT) && (s->karg[i] < 0 || s->karg[i] >= n_objs)) ||
            (k == K_CAS && (s->karg2[i] < 0 || s->karg2[i] >= n_objs))) {
            PyErr_SetString(PyExc_ValueError, "bad kind or kind argument");
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < n_all; i++)
        if (s->rn[i] < 0 || s->rn[i] >= n_all || s->rp[i] < 0 || s->rp[i] >= n_all) {
            PyErr_SetString(PyExc_ValueError, "read list index out of range");
            return -1;
        }
    for (Py_ssize_t i = 0; i < s->n_rhead; i++)
        if (s->rhead[i] >= n_all) { PyErr_SetString(PyExc_ValueError, "rhead out of range"); return -1; }
    if (init < 0 || init >= n_objs) { PyErr_SetString(PyExc_ValueError, "init"); return -1; }
    s->zob = PyMem_Malloc(sizeof(uint64_t) * (n_ops ? n_ops : 1));
    s->lin = PyMem_Calloc(s->words, sizeof(uint64_t));
    s->stk_node = PyMem_Malloc(sizeof(int32_t) * (n_ops + 1));
    s->stk_state = PyMem_Malloc(sizeof(int32_t) * (n_ops + 1));
    s->best_node = PyMem_Malloc(sizeof(int32_t) * (n_ops + 1));
    s->best_state_before = PyMem_Malloc(sizeof(int32_t) * (n_ops + 1));
    if (!s->zob || !s->lin || !s->stk_node || !s->stk_state || !s->best_node || !s->best_state_before) {
        PyErr_NoMemory();
        return -1;
    }
    uint64_t seed = 0x5EED5EEDULL;
    for (Py_ssize_t i = 0; i < n_ops; i++) s->zob[i] = splitmix(&seed);
    s->state = init; s->best_state = init; s->entry = s->nxt[0]; s->arrived = 1;
    s->remaining = remaining; s->depth = 0; s->best = -1; s->iters = 0;
    return 0;
}

static Search *search_alloc(PyTypeObject *type, Py_ssize_t n_ops, PyObject *intern, PyObject *objs) {
    Search *s = (Search *)type->tp_alloc(type, 0);
    if (!s) return NULL;
    s->n_ops = n_ops; s->n_nodes = 2 * n_ops + 2; s->tail = s->n_nodes - 1;
    s->words = (n_ops + 63) / 64; if (!s->words) s->words = 1;
    Py_INCREF(intern); s->intern = intern;
    Py_INCREF(objs); s->objs = objs;
    return s;
}

/* Search(...): from node arrays laid out in Python (checker.linearizable._compile). */
static PyObject *search_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"n_ops", "nxt", "prv", "match", "nid", "prereq", "reads", "need", "pure",
                             "is_eqread", "rn", "rp", "rhead", "steps", "intern", "objs", "init",
                             "remaining", "kind", "karg", "karg2", "unk", "args", NULL};
    Py_ssize_t n_ops, remaining;
    int init;
    PyObject *o_nxt, *o_prv, *o_match, *o_nid, *o_prereq, *o_reads, *o_need, *o_pure, *o_eq;
    PyObject *o_rn, *o_rp, *o_rhead, *steps, *intern, *objs, *o_kind, *o_karg, *o_karg2, *o_unk, *cargs;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "nOOOOOOOOOOOOO!O!O!inOOOOO!", kwlist, &n_ops, &o_nxt,
                                     &o_prv, &o_match, &o_nid, &o_prereq, &o_reads, &o_need, &o_pure,
                                     &o_eq, &o_rn, &o_rp, &o_rhead, &PyList_Type, &steps,
                                     &PyDict_Type, &intern, &PyList_Type, &objs, &init, &remaining,
                                     &o_kind, &o_karg, &o_karg2, &o_unk, &PyList_Type, &cargs))
        return NULL;
    Search *s = search_alloc(type, n_ops, intern, objs);
    if (!s) return NULL;
    Py_ssize_t nn = s->n_nodes;
    Py_INCREF(steps); s->steps = steps;
    Py_INCREF(cargs); s->args = cargs;
    if (!(s->kind = byte_array(o_kind, nn, "kind"))) goto fail;
    if (!(s->karg = int_array(o_karg, nn, NULL, "karg"))) goto fail;
    if (!(s->karg2 = int_array(o_karg2, nn, NULL, "karg2"))) goto fail;
    if (!(s->unk = byte_array(o_unk, nn, "unk"))) goto fail;
    if (!(s->nxt = int_array(o_nxt, nn, NULL, "nxt"))) goto fail;
    if (!(s->prv = int_array(o_prv, nn, NULL, "prv"))) goto fail;
    if (!(s->match = int_array(o_match, nn, NULL, "match"))) goto fail;
    if (!(s->nid = int_array(o_nid, nn, NULL, "nid"))) goto fail;
    if (!(s->prereq = int_array(o_prereq, nn, NULL, "prereq"))) goto fail;
    if (!(s->reads = int_array(o_reads, nn, NULL, "reads"))) goto fail;
    if (!(s->need = byte_array(o_need, nn, "need"))) goto fail;
    if (!(s->pure = byte_array(o_pure, nn, "pure"))) goto fail;
    if (!(s->is_eqread = byte_array(o_eq, nn, "is_eqread"))) goto fail;
    if (!(s->rn = int_array(o_rn, -1, &s->n_all, "rn"))) goto fail;
    if (!(s->rp = int_array(o_rp, s->n_all, NULL, "rp"))) goto fail;
    if (!(s->rhead = int_array(o_rhead, -1, &s->n_rhead, "rhead"))) goto fail;
    if (search_setup(s, init, remaining) < 0) goto fail;
    return (PyObject *)s;
fail:
    Py_DECREF(s);
    return NULL;
}

static PyTypeObject SearchType;

typedef struct { int32_t pos, id, is_call; } Ev;

static int ev_cmp(const void *a, const void *b) {
    int32_t x = ((const Ev *)a)->pos, y = ((const Ev *)b)->pos;
    return (x > y) - (x < y);
}

/* build(...): a Search from per-op arrays, laying the event list out here (the same layout as
 * checker.linearizable._layout: events by position, equality reads moved to per-state lists).
 * It spares the Python side its per-node work, which dominates on small histories. */
/* The Search for n ops given as C arrays (borrowed); steps/cargs: lists of n or NULL (all None). */
static PyObject *build_core(Py_ssize_t n, int32_t *call, int32_t *ret, uint8_t *kind, int32_t *karg,
                            int32_t *karg2, uint8_t *unk, uint8_t *pure, uint8_t *need, int32_t *reads,
                            int32_t *pre, PyObject *steps, PyObject *cargs, PyObject *intern,
                            PyObject *objs, int init, Py_ssize_t remaining) {
    int32_t *call_node = NULL, *ret_node = NULL;
    Ev *ev = NULL;
    Search *s = NULL;
    s = search_alloc(&SearchType, n, intern, objs);
    if (!s) goto fail;
    Py_ssize_t nn = s->n_nodes, n_objs = PyList_GET_SIZE(objs);
    ev = PyMem_Malloc(sizeof(Ev) * (2 * n + 1));
    call_node = PyMem_Malloc(sizeof(int32_t) * (n + 1));
    ret_node = PyMem_Malloc(sizeof(int32_t) * (n + 1));
    s->nxt = PyMem_Malloc(sizeof(int32_t) * nn); s->prv = PyMem_Malloc(sizeof(int32_t) * nn);
    s->match = PyMem_Malloc(sizeof(int32_t) * nn); s->nid = PyMem_Calloc(nn, sizeof(int32_t));
    s->prereq = PyMem_Malloc(sizeof(int32_t) * nn); s->reads = PyMem_Malloc(sizeof(int32_t) * nn);
    s->karg = PyMem_Calloc(nn, sizeof(int32_t)); s->karg2 = PyMem_Calloc(nn, sizeof(int32_t));
    s->kind = PyMem_Calloc(nn, 1); s->unk = PyMem_Calloc(nn, 1); s->need = PyMem_Calloc(nn, 1);
    s->pure = PyMem_Calloc(nn, 1); s->is_eqread = PyMem_Calloc(nn, 1);
    s->n_rhead = n_objs;
    s->rhead = PyMem_Malloc(sizeof(int32_t) * (n_objs ? n_objs : 1));
    s->rn = PyMem_Malloc(sizeof(int32_t) * (nn + n_objs)); s->rp = PyMem_Malloc(sizeof(int32_t) * (nn + n_objs));
    s->steps = PyList_New(nn); s->args = PyList_New(nn);
    if (!ev || !call_node || !ret_node || !s->nxt || !s->prv || !s->match || !s->nid || !s->prereq ||
        !s->reads || !s->karg || !s->karg2 || !s->kind || !s->unk || !s->need || !s->pure ||
        !s->is_eqread || !s->rhead || !s->rn || !s->rp || !s->steps || !s->args) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < nn; i++) {
        Py_INCREF(Py_None); PyList_SET_ITEM(s->steps, i, Py_None);
        Py_INCREF(Py_None); PyList_SET_ITEM(s->args, i, Py_None);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        ev[2 * i] = (Ev){call[i], (int32_t)i, 1};
        ev[2 * i + 1] = (Ev){ret[i], (int32_t)i, 0};
        if (pre[i] >= n || reads[i] >= n_objs) { PyErr_SetString(PyExc_ValueError, "op index out of range"); goto fail; }
    }
    qsort(ev, 2 * n, sizeof(Ev), ev_cmp);
    for (Py_ssize_t k = 0; k < 2 * n; k++) {
        if (k && ev[k].pos == ev[k - 1].pos) { PyErr_SetString(PyExc_ValueError, "two events at one position"); goto fail; }
        int32_t node = (int32_t)k + 1, id = ev[k].id;
        s->nid[node] = id;
        if (ev[k].is_call) call_node[id] = node; else ret_node[id] = node;
    }
    for (Py_ssize_t i = 0; i < nn; i++) {
        s->nxt[i] = i + 1 < nn ? (int32_t)i + 1 : (int32_t)i;
        s->prv[i] = i ? (int32_t)i - 1 : 0;
        s->match[i] = -1; s->prereq[i] = -1; s->reads[i] = -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t c = call_node[i];
        if (ret_node[i] < c) { PyErr_SetString(PyExc_ValueError, "a return before its call"); goto fail; }
        s->match[c] = ret_node[i];
        s->kind[c] = kind[i]; s->karg[c] = karg[i]; s->karg2[c] = karg2[i]; s->unk[c] = unk[i];
        s->pure[c] = pure[i]; s->need[c] = need[i]; s->reads[c] = reads[i]; s->prereq[c] = pre[i];
        if (steps) {
            PyObject *o = PyList_GET_ITEM(steps, i);
            Py_INCREF(o);
            PyList_SetItem(s->steps, c, o);   /* steals o, drops the None */
        }
        if (cargs) {
            PyObject *o = PyList_GET_ITEM(cargs, i);
            Py_INCREF(o);
            PyList_SetItem(s->args, c, o);
        }
    }
    /* equality reads leave the event list for one list per state they need, in call order */
    Py_ssize_t n_all = nn;
    for (Py_ssize_t i = 0; i < nn + n_objs; i++) { s->rn[i] = (int32_t)i; s->rp[i] = (int32_t)i; }
    for (Py_ssize_t i = 0; i < n_objs; i++) s->rhead[i] = -1;
    for (int32_t node = 1; node < nn - 1; node++) {
        int32_t rv = s->reads[node];
        if (s->match[node] < 0 || rv < 0) continue;
        int32_t hv = s->rhead[rv];
        if (hv < 0) hv = s->rhead[rv] = (int32_t)n_all++;
        int32_t last = s->rp[hv];
        s->rn[last] = node; s->rp[node] = last; s->rn[node] = hv; s->rp[hv] = node;
        s->is_eqread[node] = 1;
        int32_t p = s->prv[node], q = s->nxt[node];
        s->nxt[p] = q; s->prv[q] = p;
    }
    s->n_all = n_all;
    if (search_setup(s, init, remaining) < 0) goto fail;
    goto done;
fail:
    Py_CLEAR(s);
done:
    PyMem_Free(call_node); PyMem_Free(ret_node); PyMem_Free(ev);
    return (PyObject *)s;
}

static PyObject *wgl_build(PyObject *Py_UNUSED(mod), PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"call_pos", "ret_pos", "kind", "karg", "karg2", "unk", "pure", "need",
                             "reads", "prereq", "steps", "args", "intern", "objs", "init", "remaining", NULL};
    PyObject *o_call, *o_ret, *o_kind, *o_karg, *o_karg2, *o_unk, *o_pure, *o_need, *o_reads, *o_pre;
    PyObject *steps, *cargs, *intern, *objs;
    int init;
    Py_ssize_t remaining, n;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOOOOOOO!O!O!O!in", kwlist, &o_call, &o_ret, &o_kind,
                                     &o_karg, &o_karg2, &o_unk, &o_pure, &o_need, &o_reads, &o_pre,
                                     &PyList_Type, &steps, &PyList_Type, &cargs, &PyDict_Type, &intern,
                                     &PyList_Type, &objs, &init, &remaining))
        return NULL;
    n = PyList_GET_SIZE(steps);
    int32_t *call = NULL, *ret = NULL, *karg = NULL, *karg2 = NULL, *reads = NULL, *pre = NULL;
    uint8_t *kind = NULL, *unk = NULL, *pure = NULL, *need = NULL;
    PyObject *res = NULL;
    if (PyList_GET_SIZE(cargs) != n) { PyErr_SetString(PyExc_ValueError, "args: one per op"); return NULL; }
    if (!(call = int_array(o_call, n, NULL, "call_pos")) || !(ret = int_array(o_ret, n, NULL, "ret_pos")) ||
        !(karg = int_array(o_karg, n, NULL, "karg")) || !(karg2 = int_array(o_karg2, n, NULL, "karg2")) ||
        !(reads = int_array(o_reads, n, NULL, "reads")) || !(pre = int_array(o_pre, n, NULL, "prereq")) ||
        !(kind = byte_array(o_kind, n, "kind")) || !(unk = byte_array(o_unk, n, "unk")) ||
        !(pure = byte_array(o_pure, n, "pure")) || !(need = byte_array(o_need, n, "need")))
        goto fail;
    res = build_core(n, call, ret, kind, karg, karg2, unk, pure, need, reads, pre, steps, cargs, intern,
                     objs, init, remaining);
fail:
    PyMem_Free(call); PyMem_Free(ret); PyMem_Free(karg); PyMem_Free(karg2); PyMem_Free(reads);
    PyMem_Free(pre); PyMem_Free(kind); PyMem_Free(unk); PyMem_Free(pure); PyMem_Free(need);
    return res;
}

static PyObject *search_stats(Search *s, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue("{s:n,s:n,s:n}", "cache", s->c_len, "transitions", s->m_len,
                         "states", PyList_GET_SIZE(s->objs));
}

static PyMethodDef search_methods[] = {
    {"run", (PyCFunction)search_run, METH_VARARGS,
     "run(budget): None if not finished after budget iterations, else (valid, steps, longest)."},
    {"stats", (PyCFunction)search_stats, METH_NOARGS, "Sizes of the cache, memo and state table."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SearchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "checker._wgl.Search",
    .tp_basicsize = sizeof(Search),
    .tp_dealloc = (destructor)search_free,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One partition's search over an integer layout (see checker.linearizable).",
    .tp_methods = search_methods,
    .tp_new = search_new,
};


static PyObject *S_type, *S_process, *S_f, *S_value, *S_key;   /* interned attribute names */
#define SMALL_PROCS 1024

/* The index of value v in the state table, interning it if new; -1 on error (e.g. unhashable). */
static int32_t sid_of(PyObject *intern, PyObject *objs, PyObject *v) {
    PyObject *idx = PyDict_GetItemWithError(intern, v);
    if (idx) return (int32_t)PyLong_AsLong(idx);
    if (PyErr_Occurred()) return -1;
    Py_ssize_t n = PyList_GET_SIZE(objs);
    PyObject *num = PyLong_FromSsize_t(n);
    if (!num || PyDict_SetItem(intern, v, num) < 0 || PyList_Append(objs, v) < 0) { Py_XDECREF(num); return -1; }
    Py_DECREF(num);
    return (int32_t)n;
}

static int str_is(PyObject *o, const char *lit) {
    return PyUnicode_Check(o) && PyUnicode_CompareWithASCIIString(o, lit) == 0;
}


/* encode_register(client, read_nil_any, observe, allow_cas, intern, objs): the per-op arrays of
 * checker.linearizable.prepared_search for the built-in registers, in one C pass (pairing
 * included): the same ops, ids, kinds and twins as the Python pass, which stays the reference.
 * None where anything is out of the ordinary (a malformed history, another f, an unhashable
 * value, a malformed cas): the caller then takes the Python pass, which raises or copes. */
static PyObject *wgl_encode_register(PyObject *Py_UNUSED(mod), PyObject *args) {
    PyObject *ops, *intern, *objs;
    int nil_any, observe, allow_cas;
    if (!PyArg_ParseTuple(args, "OpppO!O!", &ops, &nil_any, &observe, &allow_cas, &PyDict_Type, &intern,
                          &PyList_Type, &objs))
        return NULL;
    PyObject *fast = PySequence_Fast(ops, "encode_register: a sequence of ops");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    PyObject *result = NULL, *open = PyDict_New(), *twins = PyDict_New();
    Py_ssize_t *comp = PyMem_Malloc(sizeof(Py_ssize_t) * (n ? n : 1));
    Py_ssize_t open_small[SMALL_PROCS];
    uint8_t *isinv = PyMem_Calloc(n ? n : 1, 1);
    size_t m = (size_t)(n ? n : 1);
    int32_t *c_call = PyMem_Malloc(4 * m), *c_ret = PyMem_Malloc(4 * m), *c_karg = PyMem_Malloc(4 * m);
    int32_t *c_karg2 = PyMem_Malloc(4 * m), *c_reads = PyMem_Malloc(4 * m), *c_pre = PyMem_Malloc(4 * m);
    uint8_t *c_kind = PyMem_Malloc(m), *c_unk = PyMem_Malloc(m), *c_pure = PyMem_Malloc(m), *c_need = PyMem_Malloc(m);
    if (!open || !twins || !comp || !isinv || !c_call || !c_ret || !c_karg || !c_karg2 || !c_reads ||
        !c_pre || !c_kind || !c_unk || !c_pure || !c_need) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto fail;
    }
    /* pairing; small int processes (the usual case) use an array instead of the dict */
    for (Py_ssize_t i = 0; i < SMALL_PROCS; i++) open_small[i] = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        comp[i] = -1;
        PyObject *op = items[i];
        PyObject *type = PyObject_GetAttr(op, S_type);
        PyObject *proc = type ? PyObject_GetAttr(op, S_process) : NULL;
        if (!proc) { Py_XDECREF(type); goto fail; }
        int inv = str_is(type, "invoke");
        Py_DECREF(type);
        long small = -1;
        if (PyLong_CheckExact(proc)) {
            int overflow = 0;
            long pv = PyLong_AsLongAndOverflow(proc, &overflow);
            if (!overflow && pv >= 0 && pv < SMALL_PROCS) small = pv;
        }
        Py_ssize_t at;
        if (small >= 0) {
            Py_DECREF(proc);
            if (inv) {
                if (open_small[small] >= 0) goto ordinary;
                open_small[small] = i;
                isinv[i] = 1;
                continue;
            }
            at = open_small[small];
            if (at < 0) goto ordinary;
            open_small[small] = -1;
        } else {
            if (inv) {
                int has = PyDict_Contains(open, proc);
                PyObject *pos = has == 0 ? PyLong_FromSsize_t(i) : NULL;
                int err = has != 0 || !pos || PyDict_SetItem(open, proc, pos) < 0;
                Py_XDECREF(pos); Py_DECREF(proc);
                if (has < 0 || (err && PyErr_Occurred())) goto fail;
                if (err) goto ordinary;
                isinv[i] = 1;
                continue;
            }
            PyObject *pos = PyDict_GetItemWithError(open, proc);
            if (!pos) { Py_DECREF(proc); if (PyErr_Occurred()) goto fail; goto ordinary; }
            at = PyLong_AsSsize_t(pos);
            if (PyDict_DelItem(open, proc) < 0) { Py_DECREF(proc); goto fail; }
            Py_DECREF(proc);
        }
        PyObject *f1 = PyObject_GetAttr(items[at], S_f), *f2 = PyObject_GetAttr(op, S_f);
        int same = (f1 && f2) ? PyObject_RichCompareBool(f1, f2, Py_EQ) : -1;
        Py_XDECREF(f1); Py_XDECREF(f2);
        if (same < 0) goto fail;
        if (!same) goto ordinary;
        comp[at] = i;
    }
    Py_ssize_t pending = 0, id = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!isinv[i]) continue;
        PyObject *inv = items[i], *f = PyObject_GetAttr(inv, S_f);
        if (!f) goto fail;
        int fr = str_is(f, "read"), fw = str_is(f, "write"), fc = allow_cas && str_is(f, "cas");
        Py_DECREF(f);
        if (!fr && !fw && !fc) goto ordinary;
        int code = 0;   /* 0 unknown, 1 ok, 2 fail */
        PyObject *out = NULL;
        if (comp[i] >= 0) {
            PyObject *ct = PyObject_GetAttr(items[comp[i]], S_type);
            if (!ct) goto fail;
            code = str_is(ct, "ok") ? 1 : str_is(ct, "fail") ? 2 : 0;
            Py_DECREF(ct);
            if (code == 2 && !observe) continue;
            if (code == 1 && !(out = PyObject_GetAttr(items[comp[i]], S_value))) goto fail;
        }
        if (code == 0 && fr) continue;            /* an unobserved read fits anywhere */
        PyObject *v = PyObject_GetAttr(inv, S_value);
        if (!v) { Py_XDECREF(out); goto fail; }
        long kind = 0, a = 0, b = 0, rd = -1, pre = -1;
        int bad = 0;
        if (fr) {
            if (code == 2 || (out == Py_None && nil_any)) kind = 5;
            else if ((rd = sid_of(intern, objs, out)) < 0) bad = 1;
        } else if (fw) {
            kind = 1;
            if ((a = sid_of(intern, objs, v)) < 0) bad = 1;
        } else {
            if (!(PyList_Check(v) || PyTuple_Check(v)) || PySequence_Size(v) != 2) bad = 2;
            else {
                PyObject *x = PySequence_GetItem(v, 0), *y = PySequence_GetItem(v, 1);
                if (!x || !y) bad = 1;
                else if (code == 2) { kind = 4; if ((a = sid_of(intern, objs, x)) < 0) bad = 1; }
                else {
                    kind = 3;
                    if ((a = sid_of(intern, objs, x)) < 0 || (b = sid_of(intern, objs, y)) < 0) bad = 1;
                }
                Py_XDECREF(x); Py_XDECREF(y);
            }
        }
        Py_XDECREF(out);
        if (!bad && code == 0) {   /* pending: interchangeable with earlier twins (same f, value) */
            PyObject *fv = PyObject_GetAttr(inv, S_f);
            PyObject *vv = (PyList_Check(v)) ? PyList_AsTuple(v) : (Py_INCREF(v), v);
            PyObject *key = (fv && vv) ? PyTuple_Pack(2, fv, vv) : NULL;
            Py_XDECREF(fv); Py_XDECREF(vv);
            PyObject *prev = key ? PyDict_GetItemWithError(twins, key) : NULL;
            if (prev) pre = PyLong_AsLong(prev);
            PyObject *me = PyLong_FromSsize_t(id);
            if (!key || PyErr_Occurred() || !me || PyDict_SetItem(twins, key, me) < 0) bad = 1;
            Py_XDECREF(key); Py_XDECREF(me);
        }
        Py_DECREF(v);
        if (bad) {
            if (PyErr_Occurred()) {
                if (!PyErr_ExceptionMatches(PyExc_TypeError)) goto fail;
                PyErr_Clear();
            }
            goto ordinary;
        }
        Py_ssize_t ret = comp[i] >= 0 && code ? comp[i] : n + pending;
        if (code == 0) pending++;
        c_call[id] = (int32_t)i; c_ret[id] = (int32_t)ret; c_kind[id] = (uint8_t)kind;
        c_karg[id] = (int32_t)a; c_karg2[id] = (int32_t)b; c_unk[id] = code == 0; c_need[id] = code != 0;
        c_pure[id] = (uint8_t)fr; c_reads[id] = (int32_t)rd; c_pre[id] = (int32_t)pre;
        id++;
    }
    if (id == 0 || id == pending) {   /* nothing must be linearized: valid as it stands */
        Py_INCREF(Py_True);
        result = Py_True;
    } else {
        result = build_core(id, c_call, c_ret, c_kind, c_karg, c_karg2, c_unk, c_pure, c_need, c_reads,
                            c_pre, NULL, NULL, intern, objs, 0, id - pending);
    }
    goto fail;   /* shared cleanup */
ordinary:
    Py_INCREF(Py_None);
    result = Py_None;
fail:
    PyMem_Free(c_call); PyMem_Free(c_ret); PyMem_Free(c_karg); PyMem_Free(c_karg2); PyMem_Free(c_reads);
    PyMem_Free(c_pre); PyMem_Free(c_kind); PyMem_Free(c_unk); PyMem_Free(c_pure); PyMem_Free(c_need);
    Py_XDECREF(open); Py_XDECREF(twins);
    PyMem_Free(comp); PyMem_Free(isinv);
    Py_DECREF(fast);
    return result;
}

/* clients(ops): (the ops whose process is not "nemesis", the set of their keys), in one pass:
 * checker.linearizable.partition_ops' first step, which on small histories cost as much as
 * the search. */
static PyObject *wgl_clients(PyObject *Py_UNUSED(mod), PyObject *ops) {
    PyObject *fast = PySequence_Fast(ops, "clients: a sequence of ops");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    PyObject *out = PyList_New(0), *keys = PySet_New(NULL), *result = NULL;
    if (!out || !keys) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *proc = PyObject_GetAttr(items[i], S_process);
        if (!proc) goto done;
        int nem = str_is(proc, "nemesis");
        Py_DECREF(proc);
        if (nem) continue;
        PyObject *key = PyObject_GetAttr(items[i], S_key);
        if (!key) goto done;
        int err = PySet_Add(keys, key) < 0 || PyList_Append(out, items[i]) < 0;
        Py_DECREF(key);
        if (err) goto done;
    }
    result = PyTuple_Pack(2, out, keys);
done:
    Py_XDECREF(out); Py_XDECREF(keys);
    Py_DECREF(fast);
    return result;
}

static PyMethodDef wgl_functions[] = {
    {"clients", (PyCFunction)wgl_clients, METH_O, "clients(ops): (client ops, set of their keys)."},
    {"encode_register", (PyCFunction)wgl_encode_register, METH_VARARGS,
     "encode_register(ops, read_nil_any, observe, allow_cas, intern, objs): a Search, True, or None."},
    {"build", (PyCFunction)(void (*)(void))wgl_build, METH_VARARGS | METH_KEYWORDS,
     "build(call_pos=, ret_pos=, kind=, ...): a Search laid out from per-op arrays."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef wgl_module = {
    PyModuleDef_HEAD_INIT, "checker._wgl",
    "Compiled WGL search loop; checker.linearizable holds the pure-Python reference.", -1,
    wgl_functions, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__wgl(void) {
    if (PyType_Ready(&SearchType) < 0) return NULL;
    if (!(S_type = PyUnicode_InternFromString("type")) || !(S_process = PyUnicode_InternFromString("process")) ||
        !(S_f = PyUnicode_InternFromString("f")) || !(S_value = PyUnicode_InternFromString("value")) ||
        !(S_key = PyUnicode_InternFromString("key")))
        return NULL;
    PyObject *m = PyModule_Create(&wgl_module);
    if (!m) return NULL;
    Py_INCREF(&SearchType);
    if (PyModule_AddObject(m, "Search", (PyObject *)&SearchType) < 0) {
        Py_DECREF(&SearchType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
