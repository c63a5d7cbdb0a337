// The one operator library of pointops: every schema, one line each, with its shapes.
// Kernels register per backend at the end of their own files (TORCH_LIBRARY_IMPL); fake
// kernels for tracing live in pointops/_fake.py.
#include <Python.h>
#include <torch/library.h>

extern "C" {
// `import pointops._C` only loads this library so the registrations below run; no Python
// functions are bound here.
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

TORCH_LIBRARY(pointops, m) {
  m.set_python_module("pointops._fake");
  // points (B,N,D) float, lengths (B,) int64?, start (B,) int64? -> indices (B,k) int64, sq. distances (B,k)
  m.def("fps(Tensor points, Tensor? lengths, Tensor? start, int k) -> (Tensor indices, Tensor distances)");
  // points (P,D) float, offsets (B+1,) int64, start (B,) int64? -> indices into P (B,k) int64, sq. distances (B,k)
  m.def("fps_packed(Tensor points, Tensor offsets, Tensor? start, int k) -> (Tensor indices, Tensor distances)");
}
