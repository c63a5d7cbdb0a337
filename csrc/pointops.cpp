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
  // points (B,N,C) float, lengths (B,) int64?, voxel_size [3], pc_range [6] -> voxels (B,V,K,C), coords (B,V,3) int32 zyx,
  //   num_points (B,V) int32, num_voxels (B,) int32, point_voxel (B,N) int64  (K = max_points_per_voxel, V = max_voxels)
  m.def("voxelize(Tensor points, Tensor? lengths, float[] voxel_size, float[] pc_range, int max_points_per_voxel, int max_voxels) -> (Tensor voxels, Tensor coords, Tensor num_points, Tensor num_voxels, Tensor point_voxel)");
}
