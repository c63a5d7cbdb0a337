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
  // points (B,N,C) float (x, y, z, features), lengths (B,) int64? -> image (B,n_out,H,W) float32, (B,n_out,W,H) with seed_layout
  m.def("bev_rasterize(Tensor points, Tensor? lengths, float[] point_range, float[] cell_size, str[] channels, int feature_column=3, float density_base=64.0, int height_slices=0, bool seed_layout=False) -> Tensor");
  // features (B,P,F) float, coords (B,P,3) int32 (z,y,x), num_voxels (B,) int32 -> canvas (B,F,height,width) of features' dtype
  m.def("pillar_scatter(Tensor features, Tensor coords, Tensor num_voxels, int height, int width) -> Tensor");
  // points (B,N,3) float, lengths (B,) int64?, weights (B,N) float? -> (B,n_phi,n_theta,n_rho) int32 (float32 if weighted)
  m.def("hough_planes(Tensor points, Tensor? lengths, Tensor? weights, int n_phi, int n_theta, float rho_step, float rho_max) -> Tensor");
  // as hough_planes, equal-area ball orientations -> (B,n_cells,n_rho) int32 (float32 if weighted)
  m.def("hough_planes_ball(Tensor points, Tensor? lengths, Tensor? weights, int n_phi, int n_theta, float rho_step, float rho_max) -> Tensor");
  // acc (B,*dims) int32/float32 -> votes (B,k) acc dtype, indices (B,k,ndim) int64
  m.def("hough_peaks(Tensor acc, int[] radius, bool[] periodic, float min_votes, int k, bool plane_seam=False) -> (Tensor votes, Tensor indices)");
  // points (B,N,3) float, lengths (B,) int64?, planes (B,K,4) float (n, d: n.p = d) -> labels (B,N) int64: first plane within threshold, else -1
  m.def("plane_labels(Tensor points, Tensor? lengths, Tensor planes, float threshold) -> Tensor");
  // as plane_labels -> least-squares planes of each plane's inliers (B,K,4) float32, inlier counts (B,K) int64
  m.def("plane_refit(Tensor points, Tensor? lengths, Tensor planes, float threshold) -> (Tensor planes, Tensor inliers)");
  // points (B,N,C) float, lengths (B,) int64?, voxel_size [3], pc_range [6] -> voxels (B,V,K,C), coords (B,V,3) int32 zyx,
  //   num_points (B,V) int32, num_voxels (B,) int32, point_voxel (B,N) int64  (K = max_points_per_voxel, V = max_voxels)
  m.def("voxelize(Tensor points, Tensor? lengths, float[] voxel_size, float[] pc_range, int max_points_per_voxel, int max_voxels) -> (Tensor voxels, Tensor coords, Tensor num_points, Tensor num_voxels, Tensor point_voxel)");

  // ---- geometry: neighbourhoods (kNN, ball query, interpolation) ----
  m.set_python_module("pointops.geometry.neighbors");
  // queries (B,M,3) float, query_lengths (B,) int64?, points (B,N,3) float, lengths (B,) int64? -> indices (B,M,k) int64, sq. distances (B,M,k)
  m.def("knn(Tensor queries, Tensor? query_lengths, Tensor points, Tensor? lengths, int k) -> (Tensor indices, Tensor distances)");
  // queries (Mq,3), query_offsets (B+1,) int64, points (P,3), offsets (B+1,) int64 -> indices into P (Mq,k) int64, sq. distances (Mq,k)
  m.def("knn_packed(Tensor queries, Tensor query_offsets, Tensor points, Tensor offsets, int k) -> (Tensor indices, Tensor distances)");
  // as knn, radius >= 0 -> indices (B,M,k) int64: first k hits by index (d2 < radius^2), padded with the first hit or -1; counts (B,M) int64
  m.def("ball_query(Tensor queries, Tensor? query_lengths, Tensor points, Tensor? lengths, float radius, int k, bool repeat_first=True) -> (Tensor indices, Tensor counts)");
  // features (B,N,C) float, indices (B,M,K) int64 (outside [0,N): none), weights (B,M,K) features' dtype -> (B,M,C): sum_j weights * features[indices]
  m.def("interpolate(Tensor features, Tensor indices, Tensor weights) -> Tensor");

  // ---- geometry: downsampling, normals, registration ----

  // ---- hough: 2D circles and lines ----

  // ---- ppf: point pair features ----
}
