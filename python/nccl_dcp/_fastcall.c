/* nccl_dcp._fastcall: the eager hot path of Context.__call__ in C.
 *
 * Why C: an eager call through ctypes costs about as much host time as the
 * kernel launch it makes (issue 24): argtypes conversion of eight arguments
 * alone is ~0.5 us, and building and hashing a Python layout key of
 * twelve torch attributes as much again. Here one METH_FASTCALL call reads
 * the tensors' metadata, finds the checked layout in a small hash table
 * and calls ncclDcpA2aLseReduceEx through its function pointer.
 *
 * Optional: plain Python C API (no torch headers, no pybind), built by
 * `pip install ./python` when a C compiler and Python.h are there; without
 * it nccl_dcp uses context.PyLauncher (ctypes), the same contract in Python.
 *
 * Contract (mirrored by context.PyLauncher; Context owns the checks):
 *   Launcher(fn, handle, raw_stream, device_index, device, dtype, lse_dtype, local_heads, head_dim
 *            [, out_lse_dtype, lse_align])
 *     fn: address of ncclDcpA2aLseReduceEx; handle: the ncclDcpContext_t;
 *     raw_stream(device_index) -> cudaStream_t int (the current stream);
 *     device: the torch.device every tensor must be on (checked as
 *     is_cuda and get_device(): exact for a CUDA device; the tests' CPU
 *     device takes any tensor of index -1); dtype: the torch dtype of
 *     partial_out and out; lse_dtype: that of partial_lse, out_lse_dtype
 *     that of out_lse (default: lse_dtype); lse_align: the alignment in
 *     bytes partial_lse's pointer must have (default 4: its element size);
 *     out, when made here, is [B, local_heads, head_dim] (the context's
 *     heads per out row: Hl for HEAD, H for NONE; Context never leaves a
 *     TOKEN call's out to the launcher, its rows are not B).
 *   launch(po, pl, out, out_lse, stream[, args]) -> out, or an int when the call
 *     failed: the library's ncclResult_t, or < 0 when it was not called:
 *     an unknown layout, a wrong dtype or device, a misaligned pointer, a
 *     stream that is not None or an int, not tensors, a closed launcher.
 *     args: None or the address (an int) of the call's ncclDcpCallArgs_t,
 *     checked by Context (the layout key does not see it; Context checks
 *     out's rows against a TOKEN call's counts before every launch).
 *     The caller then checks the call in Python (naming the bad argument)
 *     and remember()s the layout. out None: allocated
 *     (po.new_empty(B, Hl, D), ~0.15 us less than from Python) and
 *     returned.
 *   remember(po, pl, out, out_lse, batch, strides) -> bool
 *     caches the layout of tensors that Python just checked: the key is
 *     every tensor's shape and strides (with dtype and device checked on
 *     every call, that is all that check_call reads except the pointers);
 *     strides: the bytes of their ncclDcpStrides_t.
 *   close(): launch() returns -1 from now on.
 *
 * What the key leaves to other checks, on every call: dtype and device
 * (here), pointer alignment (here and in the library), NULL pointers,
 * view extents and out overlapping an input (the library, checkCall).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX < 0x03090000 /* Python 3.8 */
#define PyObject_CallMethodNoArgs(obj, name) PyObject_CallMethodObjArgs((obj), (name), NULL)
#define PyObject_CallOneArg(fn, arg) PyObject_CallFunctionObjArgs((fn), (arg), NULL)
#endif

typedef int (*ReduceFn)(void* ctx, const void* partialOut, const void* partialLse, void* out, float* outLse,
                        int batch, const void* strides, const void* args, void* stream);

enum {
  kMaxDims = 4,       /* partial_out has 3 or 4 dimensions, the others fewer */
  kKeyWords = 32,     /* [0] = words used; then per tensor: ndim, sizes, strides (or ndim + kContiguous, sizes) */
  kContiguous = 16,
  kStrideBytes = 128, /* >= sizeof(ncclDcpStrides_t) (96) */
  kMaxEntries = 256,  /* then the table starts over (as a Python dict would be cleared) */
  kSlots = 512,       /* power of two, >= 2 * kMaxEntries */
};

typedef struct {
  int64_t key[kKeyWords];
  int64_t batch;
  unsigned char strides[kStrideBytes];
} Entry;

typedef struct {
  PyObject_HEAD
  ReduceFn fn;
  void* handle;
  PyObject* raw_stream;
  PyObject* device_index;
  PyObject* device;
  PyObject* want_cuda; /* Py_True / Py_False: device.type == "cuda" */
  long want_index;     /* device.index, -1 for none (as get_device() says for the CPU) */
  PyObject* dtype;
  PyObject* lse_dtype;
  PyObject* out_lse_dtype;
  uintptr_t lse_mask; /* partial_lse's pointer & lse_mask must be 0 */
  PyObject* local_heads; /* Hl and D, ints: out is [B, Hl, D] */
  PyObject* head_dim;
  int64_t hl, d;
  Entry* entries; /* kMaxEntries, allocated at the first remember() */
  int n_entries;
  int16_t slots[kSlots]; /* index into entries, -1 empty */
} Launcher;

/* The tensor accessors, in the order read_tensor uses them. On an exact
 * torch.Tensor each is its C getter or method, called directly (no
 * attribute lookup, ~10 ns less each, ~20 per call); on anything else, or
 * when torch.Tensor overrides it in Python, the attribute. */
typedef struct {
  const char* name;
  int is_method;
  PyObject* interned;
  getter get; /* a getset descriptor's */
  void* closure;
  PyCFunction meth; /* a method descriptor's, METH_NOARGS or METH_VARARGS | METH_KEYWORDS */
  int flags;
} Accessor;

enum { kDtype, kIsCuda, kGetDevice, kShape, kIsContiguous, kStride, kDataPtr, kNewEmpty, kAccessors };
static Accessor accessors[kAccessors] = {{"dtype", 0},  {"is_cuda", 0},       {"get_device", 1},
                                         {"shape", 0},  {"is_contiguous", 1}, {"stride", 1},
                                         {"data_ptr", 1}, {"new_empty", 1} /* new_out() only */};
static PyTypeObject* tensor_type; /* torch.Tensor once its accessors are resolved */
static PyObject* empty_tuple;

static PyObject* get(PyObject* t, int i) {
  const Accessor* a = &accessors[i];
  if (Py_TYPE(t) == tensor_type) {
    if (a->get) return a->get(t, a->closure);
    if (a->flags == METH_NOARGS) return a->meth(t, NULL);
    if (a->flags == (METH_VARARGS | METH_KEYWORDS))
      return ((PyCFunctionWithKeywords)(void (*)(void))a->meth)(t, empty_tuple, NULL);
  }
  return a->is_method ? PyObject_CallMethodNoArgs(t, a->interned) : PyObject_GetAttr(t, a->interned);
}

/* Resolves the accessors of torch.Tensor (imported: torch is loaded by
 * then); an accessor that is not a C descriptor stays generic. */
static int resolve_accessors(void) {
  if (tensor_type != NULL) return 0;
  PyObject* torch = PyImport_ImportModule("torch");
  if (torch == NULL) return -1;
  PyObject* type = PyObject_GetAttrString(torch, "Tensor");
  Py_DECREF(torch);
  if (type == NULL) return -1;
  if (!PyType_Check(type)) {
    Py_DECREF(type);
    PyErr_SetString(PyExc_TypeError, "torch.Tensor is not a type");
    return -1;
  }
  for (int i = 0; i < kAccessors; i++) {
    Accessor* a = &accessors[i];
    PyObject* d = PyObject_GetAttr(type, a->interned); /* kept: torch.Tensor's own, alive as long as torch */
    if (d == NULL) {
      PyErr_Clear();
      continue;
    }
    if (!PyObject_TypeCheck(d, &PyMethodDescr_Type) && !PyObject_TypeCheck(d, &PyGetSetDescr_Type)) {
      /* a Python override: the attribute */
    } else if (!PyType_IsSubtype((PyTypeObject*)type, PyDescr_TYPE(d))) {
      /* not one of torch.Tensor's own (its metaclass's?): the attribute */
    } else if (!a->is_method && Py_TYPE(d) == &PyGetSetDescr_Type) {
      a->get = ((PyGetSetDescrObject*)d)->d_getset->get;
      a->closure = ((PyGetSetDescrObject*)d)->d_getset->closure;
    } else if (a->is_method && Py_TYPE(d) == &PyMethodDescr_Type) {
      const PyMethodDef* m = ((PyMethodDescrObject*)d)->d_method;
      int flags = m->ml_flags & (METH_VARARGS | METH_KEYWORDS | METH_NOARGS | METH_O | METH_FASTCALL);
      if (flags == METH_NOARGS || flags == (METH_VARARGS | METH_KEYWORDS)) {
        a->meth = m->ml_meth;
        a->flags = flags;
      }
    }
    if (a->get == NULL && a->meth == NULL) Py_DECREF(d);
  }
  tensor_type = (PyTypeObject*)type;
  return 0;
}

/* A failed accessor: an Exception means "not a fast call" (Python's checks
 * will say what is wrong); anything else (KeyboardInterrupt) propagates. */
static int not_fast(void) {
  if (PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -2;
    PyErr_Clear();
  }
  return -1;
}

/* Appends the ints of a tuple to key; *positive: all > 0. 0 ok, -1 not fast. */
static int put_ints(int64_t* key, int* pos, PyObject* tuple, Py_ssize_t n, int* positive) {
  if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != n || *pos + n > kKeyWords) return -1;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* v = PyTuple_GET_ITEM(tuple, i);
    if (!PyLong_CheckExact(v)) return -1;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) return not_fast();
    *positive &= x > 0;
    key[(*pos)++] = x;
  }
  return 0;
}

/* Reads one tensor: checks dtype and device, appends its dims to key,
 * returns its data_ptr in *ptr. 0 ok, -1 not fast, -2 error to raise. */
static int read_tensor(Launcher* self, PyObject* t, PyObject* want_dtype, int64_t* key, int* pos, uintptr_t* ptr) {
  PyObject *v = NULL, *sizes = NULL, *strides = NULL;
  int r = -1, same;
  if (!(v = get(t, kDtype))) goto fail;
  same = v == want_dtype;
  Py_DECREF(v);
  if (!same) return -1;
  if (!(v = get(t, kIsCuda))) goto fail;
  same = v == self->want_cuda;
  Py_DECREF(v);
  if (!same) return -1;
  if (!(v = get(t, kGetDevice))) goto fail;
  long index = PyLong_CheckExact(v) ? PyLong_AsLong(v) : -2;
  Py_DECREF(v);
  if (index != self->want_index || PyErr_Occurred()) goto fail;
  /* The sizes, then the strides; or, for a contiguous tensor of more than
   * 0 elements, a mark that says so: its strides of every dimension but
   * those of size 1 follow from its sizes, and those are never used (the
   * library is given 0 for them), so its ncclDcpStrides_t does too. */
  if (!(sizes = get(t, kShape))) goto fail;
  if (!PyTuple_Check(sizes) || PyTuple_GET_SIZE(sizes) > kMaxDims || *pos + 1 > kKeyWords) goto done;
  Py_ssize_t n = PyTuple_GET_SIZE(sizes);
  int at = (*pos)++, positive = 1;
  if ((r = put_ints(key, pos, sizes, n, &positive)) != 0) goto done;
  if (positive) {
    if (!(v = get(t, kIsContiguous))) goto fail;
    same = v == Py_True;
    Py_DECREF(v);
  } else {
    same = 0;
  }
  key[at] = same ? n + kContiguous : n;
  if (!same) {
    if (!(strides = get(t, kStride))) goto fail;
    if ((r = put_ints(key, pos, strides, n, &positive)) != 0) goto done;
  }
  if (!(v = get(t, kDataPtr))) goto fail;
  *ptr = (uintptr_t)PyLong_AsVoidPtr(v);
  Py_DECREF(v);
  if (*ptr == (uintptr_t)-1 && PyErr_Occurred()) goto fail;
  r = 0;
  goto done;
fail:
  r = not_fast();
done:
  Py_XDECREF(sizes);
  Py_XDECREF(strides);
  return r;
}

/* partial_out.new_empty(batch, Hl, D): out, when the caller gave none. */
static PyObject* new_out(Launcher* self, PyObject* po, int64_t batch) {
  const Accessor* a = &accessors[kNewEmpty];
  PyObject* b = PyLong_FromLongLong(batch);
  PyObject* out = NULL;
  if (b == NULL) return NULL;
  if (Py_TYPE(po) == tensor_type && a->flags == (METH_VARARGS | METH_KEYWORDS)) {
    PyObject* sizes = PyTuple_Pack(3, b, self->local_heads, self->head_dim);
    if (sizes != NULL) out = ((PyCFunctionWithKeywords)(void (*)(void))a->meth)(po, sizes, NULL);
    Py_XDECREF(sizes);
  } else {
    out = PyObject_CallMethodObjArgs(po, a->interned, b, self->local_heads, self->head_dim, NULL);
  }
  Py_DECREF(b);
  return out;
}

/* The key of a call (key[0] = words used) and its four pointers. Without
 * out (t[2] None; *made stays NULL until then): for an exact torch.Tensor
 * partial_out (torch's own new_empty), the words read_tensor gives for a
 * new partial_out.new_empty(B, Hl, D) (its dtype and device, contiguous),
 * so that launch() allocates it on a hit only; for anything else, out is
 * allocated here (*made) and read. */
static int read_call(Launcher* self, PyObject* const* t, PyObject** made, int64_t* key, uintptr_t* ptr) {
  int pos = 1, r;
  PyObject* want[4] = {self->dtype, self->lse_dtype, self->dtype, self->out_lse_dtype};
  ptr[2] = ptr[3] = 0;
  for (int i = 0; i < 4; i++) {
    PyObject* x = t[i];
    if (i == 3 && x == Py_None) {
      key[pos++] = -1; /* no out_lse: another layout than any with one */
      break;
    }
    if (i == 2 && x == Py_None) {
      if (made == NULL || key[1] % kContiguous == 0) return -1; /* remember(), or a 0-d partial_out */
      const int64_t batch = key[2], hl = self->hl, d = self->d;
      if (Py_TYPE(t[0]) == tensor_type && accessors[kNewEmpty].meth != NULL) {
        const int64_t words[] = {3 + kContiguous, batch, hl, d}, empty[] = {3, batch, hl, d, hl * d, d, 1};
        const int64_t* w = batch > 0 ? words : empty; /* 0 rows: contiguous whatever the strides (torch) */
        const int n = batch > 0 ? 4 : 7;
        if (pos + n > kKeyWords) return -1;
        for (int j = 0; j < n; j++) key[pos++] = w[j];
        continue;
      }
      if ((*made = new_out(self, t[0], batch)) == NULL) return not_fast();
      x = *made;
    }
    if ((r = read_tensor(self, x, want[i], key, &pos, &ptr[i])) != 0) return r;
  }
  key[0] = pos;
  return 0;
}

static uint64_t hash_key(const int64_t* key) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int64_t i = 0; i < key[0]; i++) h = (h ^ (uint64_t)key[i]) * 0x100000001b3ull;
  return h ^ (h >> 29);
}

/* The slot of key: its entry, or the empty slot where it would go. */
static int16_t* find_slot(Launcher* self, const int64_t* key) {
  uint64_t i = hash_key(key);
  for (;; i++) {
    int16_t* s = &self->slots[i & (kSlots - 1)];
    if (*s < 0 || memcmp(self->entries[*s].key, key, (size_t)key[0] * sizeof(int64_t)) == 0) return s;
  }
}

/* launch()'s "not called": -1. The caller tells success by identity with
 * out (launch() returns out), and small ints are shared objects: for an
 * int out (a wrong argument, checked in Python) a new one, -1000. */
static PyObject* not_called_result(PyObject* out) {
  return PyLong_FromLong(PyLong_Check(out) ? -1000 : -1);
}

static PyObject* launcher_launch(Launcher* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5 && nargs != 6) {
    PyErr_SetString(PyExc_TypeError, "launch(partial_out, partial_lse, out, out_lse, stream[, args])");
    return NULL;
  }
  PyObject* stream = args[4]; /* None or a cudaStream_t int; Python takes anything else */
  PyObject* call_args = nargs == 6 ? args[5] : Py_None; /* None or an ncclDcpCallArgs_t address */
  if (self->handle == NULL || self->n_entries == 0 || (stream != Py_None && !PyLong_CheckExact(stream)) ||
      (call_args != Py_None && !PyLong_CheckExact(call_args)))
    return not_called_result(args[2]);
  int64_t key[kKeyWords];
  uintptr_t p[4];
  PyObject* out = NULL; /* a new reference: the caller's out, or one allocated here */
  int r = read_call(self, args, &out, key, p);
  if (r != 0) goto not_called;
  if (((p[0] | p[2]) & 15) || (p[1] & self->lse_mask) || (p[3] & 3)) goto not_called; /* Python names it */
  int16_t slot = *find_slot(self, key);
  if (slot < 0) goto not_called;
  /* Copies, before anything that may run Python or release the GIL:
   * another thread may change the table. */
  unsigned char strides[kStrideBytes];
  memcpy(strides, self->entries[slot].strides, sizeof strides);
  const int batch = (int)self->entries[slot].batch;

  if (args[2] != Py_None) {
    out = args[2];
    Py_INCREF(out);
  } else if (out == NULL) { /* the layout's key said what it will be */
    if ((out = new_out(self, args[0], batch)) == NULL) return NULL;
    PyObject* v = get(out, kDataPtr);
    if (v == NULL) goto error;
    p[2] = (uintptr_t)PyLong_AsVoidPtr(v);
    Py_DECREF(v);
    if (p[2] == (uintptr_t)-1 && PyErr_Occurred()) goto error;
    if (p[2] & 15) goto not_called;
  }
  void* s;
  if (stream == Py_None) {
    PyObject* v = PyObject_CallOneArg(self->raw_stream, self->device_index);
    if (v == NULL) goto error;
    s = PyLong_AsVoidPtr(v);
    Py_DECREF(v);
    if (s == (void*)-1 && PyErr_Occurred()) goto error;
  } else {
    s = (void*)(uintptr_t)PyLong_AsUnsignedLongLong(stream);
    if (PyErr_Occurred()) { /* < 0 or > 2^64 - 1: Python names it */
      PyErr_Clear();
      goto not_called;
    }
  }
  const void* a = NULL;
  if (call_args != Py_None) {
    a = PyLong_AsVoidPtr(call_args);
    if (a == NULL && PyErr_Occurred()) goto error;
  }
  ReduceFn fn = self->fn;
  void* handle = self->handle;
  if (handle == NULL) goto not_called; /* closed meanwhile */
  int result;
  /* As ctypes: the GIL is released around the call (it may wait for NCCL). */
  Py_BEGIN_ALLOW_THREADS
  result = fn(handle, (const void*)p[0], (const void*)p[1], (void*)p[2], (float*)p[3], batch, strides, a, s);
  Py_END_ALLOW_THREADS
  if (result == 0) return out;
  Py_DECREF(out);
  return PyLong_FromLong(result);
not_called:
  Py_XDECREF(out);
  if (r == -2) return NULL;
  return not_called_result(args[2]);
error:
  Py_XDECREF(out);
  return NULL;
}

static PyObject* launcher_remember(Launcher* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 6) {
    PyErr_SetString(PyExc_TypeError, "remember(partial_out, partial_lse, out, out_lse, batch, strides)");
    return NULL;
  }
  if (self->handle == NULL) Py_RETURN_FALSE;
  Py_buffer view;
  long long batch = PyLong_AsLongLong(args[4]);
  if (batch == -1 && PyErr_Occurred()) return NULL;
  if (PyObject_GetBuffer(args[5], &view, PyBUF_SIMPLE) != 0) return NULL;
  if (view.len > kStrideBytes) {
    PyBuffer_Release(&view);
    PyErr_SetString(PyExc_ValueError, "strides: too many bytes");
    return NULL;
  }
  int64_t key[kKeyWords];
  uintptr_t p[4];
  int r = read_call(self, args, NULL, key, p);
  if (r != 0) {
    PyBuffer_Release(&view);
    if (r == -2) return NULL;
    Py_RETURN_FALSE;
  }
  if (self->entries == NULL && !(self->entries = PyMem_Malloc(sizeof(Entry) * kMaxEntries))) {
    PyBuffer_Release(&view);
    return PyErr_NoMemory();
  }
  if (self->n_entries == kMaxEntries) {
    self->n_entries = 0;
    memset(self->slots, 0xff, sizeof self->slots);
  }
  int16_t* s = find_slot(self, key);
  if (*s < 0) *s = (int16_t)self->n_entries++;
  Entry* e = &self->entries[*s];
  memcpy(e->key, key, (size_t)key[0] * sizeof(int64_t));
  e->batch = batch;
  memset(e->strides, 0, sizeof e->strides);
  memcpy(e->strides, view.buf, (size_t)view.len);
  PyBuffer_Release(&view);
  Py_RETURN_TRUE;
}

static PyObject* launcher_close(Launcher* self, PyObject* unused) {
  self->handle = NULL;
  Py_RETURN_NONE;
}

static PyObject* launcher_len(Launcher* self, PyObject* unused) { return PyLong_FromLong(self->n_entries); }

static int launcher_init(Launcher* self, PyObject* args, PyObject* kwargs) {
  PyObject *fn, *handle, *raw_stream, *device_index, *device, *dtype, *lse_dtype, *local_heads, *head_dim;
  PyObject* out_lse_dtype = NULL;
  int lse_align = 4;
  if (!PyArg_ParseTuple(args, "OOOOOOOO!O!|Oi:Launcher", &fn, &handle, &raw_stream, &device_index, &device, &dtype,
                        &lse_dtype, &PyLong_Type, &local_heads, &PyLong_Type, &head_dim, &out_lse_dtype, &lse_align))
    return -1;
  if (out_lse_dtype == NULL) out_lse_dtype = lse_dtype;
  if (lse_align != 2 && lse_align != 4) {
    PyErr_SetString(PyExc_ValueError, "Launcher: lse_align must be 2 or 4");
    return -1;
  }
  self->lse_mask = (uintptr_t)lse_align - 1;
  if (PyLong_AsLongLong(local_heads) < 1 || PyLong_AsLongLong(head_dim) < 1) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Launcher: local_heads and head_dim must be >= 1");
    return -1;
  }
  void* f = PyLong_AsVoidPtr(fn);
  if (f == NULL && PyErr_Occurred()) return -1;
  void* h = PyLong_AsVoidPtr(handle);
  if (h == NULL && PyErr_Occurred()) return -1;
  if (f == NULL || h == NULL) {
    PyErr_SetString(PyExc_ValueError, "Launcher: fn and handle must not be NULL");
    return -1;
  }
  self->fn = (ReduceFn)f;
  self->handle = h;
  Py_INCREF(raw_stream);
  Py_XSETREF(self->raw_stream, raw_stream);
  Py_INCREF(device_index);
  Py_XSETREF(self->device_index, device_index);
  Py_INCREF(device);
  Py_XSETREF(self->device, device);
  Py_INCREF(dtype);
  Py_XSETREF(self->dtype, dtype);
  Py_INCREF(lse_dtype);
  Py_XSETREF(self->lse_dtype, lse_dtype);
  Py_INCREF(out_lse_dtype);
  Py_XSETREF(self->out_lse_dtype, out_lse_dtype);
  Py_INCREF(local_heads);
  Py_XSETREF(self->local_heads, local_heads);
  Py_INCREF(head_dim);
  Py_XSETREF(self->head_dim, head_dim);
  self->hl = PyLong_AsLongLong(local_heads);
  self->d = PyLong_AsLongLong(head_dim);
  PyObject* type = PyObject_GetAttrString(device, "type");
  if (type == NULL) return -1;
  int cuda = PyUnicode_Check(type) && PyUnicode_CompareWithASCIIString(type, "cuda") == 0;
  Py_DECREF(type);
  PyObject* index = PyObject_GetAttrString(device, "index");
  if (index == NULL) return -1;
  self->want_index = index == Py_None ? -1 : PyLong_AsLong(index);
  Py_DECREF(index);
  if (self->want_index == -1 && PyErr_Occurred()) return -1;
  self->want_cuda = cuda ? Py_True : Py_False;
  if (resolve_accessors() != 0) return -1;
  self->n_entries = 0;
  memset(self->slots, 0xff, sizeof self->slots);
  return 0;
}

static void launcher_dealloc(Launcher* self) {
  Py_XDECREF(self->raw_stream);
  Py_XDECREF(self->device_index);
  Py_XDECREF(self->device);
  Py_XDECREF(self->dtype);
  Py_XDECREF(self->lse_dtype);
  Py_XDECREF(self->out_lse_dtype);
  Py_XDECREF(self->local_heads);
  Py_XDECREF(self->head_dim);
  PyMem_Free(self->entries);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static PyMethodDef launcher_methods[] = {
    {"launch", (PyCFunction)(void (*)(void))launcher_launch, METH_FASTCALL,
     "launch(partial_out, partial_lse, out, out_lse, stream[, args]) -> out, or ncclResult_t, or -1: not called"},
    {"remember", (PyCFunction)(void (*)(void))launcher_remember, METH_FASTCALL,
     "remember(partial_out, partial_lse, out, out_lse, batch, strides) -> bool: caches a checked layout"},
    {"close", (PyCFunction)launcher_close, METH_NOARGS, "close(): launch() returns -1 from now on"},
    {"layouts", (PyCFunction)launcher_len, METH_NOARGS, "layouts() -> number of cached layouts"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LauncherType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nccl_dcp._fastcall.Launcher",
    .tp_basicsize = sizeof(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The eager hot path of one Context (see the top of _fastcall.c).",
    .tp_methods = launcher_methods,
    .tp_init = (initproc)launcher_init,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)launcher_dealloc,
};

/* direct() -> the accessors called directly on torch.Tensor (once a Launcher was made). */
static PyObject* fastcall_direct(PyObject* module, PyObject* unused) {
  PyObject* names = PyList_New(0);
  if (names == NULL) return NULL;
  for (int i = 0; tensor_type != NULL && i < kAccessors; i++) {
    if ((accessors[i].get || accessors[i].meth) && PyList_Append(names, accessors[i].interned) != 0) {
      Py_DECREF(names);
      return NULL;
    }
  }
  return names;
}

static PyMethodDef fastcall_functions[] = {
    {"direct", fastcall_direct, METH_NOARGS, "direct() -> names of the accessors called directly on torch.Tensor"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastcall_module = {
    PyModuleDef_HEAD_INIT, .m_name = "nccl_dcp._fastcall", .m_doc = "The eager hot path of Context in C.",
    .m_size = -1, .m_methods = fastcall_functions,
};

PyMODINIT_FUNC PyInit__fastcall(void) {
  for (int i = 0; i < kAccessors; i++)
    if (!(accessors[i].interned = PyUnicode_InternFromString(accessors[i].name))) return NULL;
  if (!(empty_tuple = PyTuple_New(0))) return NULL;
  if (PyType_Ready(&LauncherType) < 0) return NULL;
  PyObject* m = PyModule_Create(&fastcall_module);
  if (m == NULL) return NULL;
  Py_INCREF(&LauncherType);
  if (PyModule_AddObject(m, "Launcher", (PyObject*)&LauncherType) < 0) {
    Py_DECREF(&LauncherType);
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
