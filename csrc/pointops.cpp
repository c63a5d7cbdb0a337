// The one operator library of pointops: every schema, one line each, with its shapes.
// Kernels register per backend at the end of their own files (TORCH_LIBRARY_IMPL); fake kernels
// and gradients are registered in Python, by each family's package (pointops/<family>/).
// No Python here: the same sources build the Python package's pointops/_C library (setup.py,
// loaded with torch.ops.load_library) and libpointops for C++ programs (CMakeLists.txt).
// The C++ API (include/pointops/pointops.h, csrc/api.cpp) is generated from this file by
// tools/gen_cpp_api.py: a changed schema is followed by a run of it.
#include <torch/library.h>

TORCH_LIBRARY(pointops, m) {
  // Each family's fake kernels and gradients are registered by its Python module; torch imports
  // the module named before a schema when it needs the op's fake kernel.
  m.set_python_module("pointops.sampling.ops");
  // points (B,N,D) float, lengths (B,) int64?, start (B,) int64? -> indices (B,k) int64, sq. distances (B,k)
  m.def("fps(Tensor points, Tensor? lengths, Tensor? start, int k) -> (Tensor indices, Tensor distances)");
  // points (P,D) float, offsets (B+1,) int64, start (B,) int64? -> indices into P (B,k) int64, sq. distances (B,k)
  m.def("fps_packed(Tensor points, Tensor offsets, Tensor? start, int k) -> (Tensor indices, Tensor distances)");
  m.set_python_module("pointops.bev.ops");
  // points (B,N,C) float (x, y, z, features), lengths (B,) int64? -> image (B,n_out,H,W) float32, (B,n_out,W,H) with forward_up (x forward pointing up)
  m.def("bev_rasterize(Tensor points, Tensor? lengths, float[] point_range, float[] cell_size, str[] channels, int feature_column=3, float density_base=64.0, int height_slices=0, bool forward_up=False) -> Tensor");
  // features (B,P,F) float, coords (B,P,3) int32 (z,y,x), num_voxels (B,) int64 -> canvas (B,F,height,width) of features' dtype
  m.def("pillar_scatter(Tensor features, Tensor coords, Tensor num_voxels, int height, int width) -> Tensor");
  // points (B,N,C) float, lengths (B,) int64?, voxel_size [3], point_range [6] -> voxels (B,V,K,C), coords (B,V,3) int32 zyx,
  //   num_points (B,V) int32, num_voxels (B,) int64, point_voxel (B,N) int64  (K = max_points_per_voxel, V = max_voxels)
  m.def("voxelize(Tensor points, Tensor? lengths, float[] voxel_size, float[] point_range, int max_points_per_voxel, int max_voxels) -> (Tensor voxels, Tensor coords, Tensor num_points, Tensor num_voxels, Tensor point_voxel)");
  m.set_python_module("pointops.hough.planes");
  // points (B,N,3) float, lengths (B,) int64?, weights (B,N) float? -> (B,n_phi,n_theta,n_rho) int32 (float32 if weighted)
  m.def("hough_planes(Tensor points, Tensor? lengths, Tensor? weights, int n_phi, int n_theta, float rho_step, float rho_max) -> Tensor");
  // as hough_planes, equal-area ball orientations -> (B,n_cells,n_rho) int32 (float32 if weighted)
  m.def("hough_planes_ball(Tensor points, Tensor? lengths, Tensor? weights, int n_phi, int n_theta, float rho_step, float rho_max) -> Tensor");
  // acc (B,*dims) int32/float32 -> votes (B,k) acc dtype, indices (B,k,ndim) int64
  m.def("hough_peaks(Tensor acc, int[] radius, bool[] periodic, float min_votes, int k, bool plane_seam=False) -> (Tensor votes, Tensor indices)");
  // points (B,N,3) float, lengths (B,) int64?, planes (B,K,4) float (n, d: n.p = d) -> labels (B,N) int64: first plane within threshold, else -1
  m.def("plane_labels(Tensor points, Tensor? lengths, Tensor planes, float threshold) -> Tensor");
  // as plane_labels -> least-squares planes of each plane's inliers (B,K,4) float32, inlier counts (B,K) int64;
  //   one refit per band, each of the previous one's planes within band * threshold (counts: the last band's)
  m.def("plane_refit(Tensor points, Tensor? lengths, Tensor planes, float threshold, float[] bands=[1.0]) -> (Tensor planes, Tensor inliers)");
  // planes (B,K,4) float, strongest first, K <= 1024 -> (B,K,4) float32: rows repeating a kept stronger one
  //   (normals within max_angle radians, either sign, offsets within max_offset) NaN
  m.def("plane_suppress(Tensor planes, float max_angle, float max_offset) -> Tensor");
  // acc (B,n_phi,n_theta,n_rho) grid or (B,n_cells,n_rho) ball, int32/float32 -> the k strongest peaks' bin-centre
  //   planes (B,k,4) float32 NaN padded, votes (B,k) float32
  m.def("plane_detections(Tensor acc, int n_phi, int n_theta, float rho_step, float rho_max, int k, int radius=1, float min_votes=1.0) -> (Tensor planes, Tensor votes)");
  // points (B,N,C>=3) float, lengths (B,) int64? -> planes (B,k,4) float32 (n, d: n.p = d >= 0) NaN padded,
  //   votes (B,k) float32, labels (B,N) int64 (-1: on no plane); layout "grid" or "ball"
  m.def("detect_planes(Tensor points, Tensor? lengths, int k, int n_phi, int n_theta, float rho_step, float rho_max, float distance_threshold, float min_inliers, float min_votes=1.0, int peak_radius=2, int iterations=1, str layout=\"grid\") -> (Tensor planes, Tensor votes, Tensor labels)");

  // ---- geometry: neighbourhoods (kNN, ball query, interpolation) ----
  m.set_python_module("pointops.geometry.neighbors");
  // queries (B,M,3) float, query_lengths (B,) int64?, points (B,N,3) float, lengths (B,) int64?, max_distance >= 0? -> indices (B,M,k) int64, sq. distances (B,M,k)
  m.def("knn(Tensor queries, Tensor? query_lengths, Tensor points, Tensor? lengths, int k, float? max_distance=None) -> (Tensor indices, Tensor distances)");
  // queries (Mq,3), query_offsets (B+1,) int64, points (P,3), offsets (B+1,) int64 -> indices into P (Mq,k) int64, sq. distances (Mq,k)
  m.def("knn_packed(Tensor queries, Tensor query_offsets, Tensor points, Tensor offsets, int k) -> (Tensor indices, Tensor distances)");
  // as knn, radius, min_radius >= 0 -> indices (B,M,k) int64: first k hits by index (d2 < radius^2, d2 >= min_radius^2 or 0), padded with the first hit or -1; counts (B,M) int64
  m.def("ball_query(Tensor queries, Tensor? query_lengths, Tensor points, Tensor? lengths, float radius, int k, bool repeat_first=True, float min_radius=0.) -> (Tensor indices, Tensor counts)");
  // as knn_packed, radius and min_radius as ball_query -> indices into P (Mq,k) int64, counts (Mq,) int64
  m.def("ball_query_packed(Tensor queries, Tensor query_offsets, Tensor points, Tensor offsets, float radius, int k, bool repeat_first=True, float min_radius=0.) -> (Tensor indices, Tensor counts)");
  // features (B,N,C) float, indices (B,M,K) int64 (outside [0,N): none), weights (B,M,K) features' dtype -> (B,M,C): sum_j weights * features[indices]
  m.def("interpolate(Tensor features, Tensor indices, Tensor weights) -> Tensor");
  // as knn_packed, distance >= 0 -> indices into P (Mq,k) int64: the first k hits by index (|q - p| <= distance on every
  //   axis, or squared distance <= distance^2 with ball), -1 after; counts (Mq,) int64: every hit, kept or not
  m.set_python_module("pointops.geometry.cube_query");
  m.def("cube_query_packed(Tensor queries, Tensor query_offsets, Tensor points, Tensor offsets, float distance, int k, bool ball=False) -> (Tensor indices, Tensor counts)");

  // ---- geometry: downsampling, normals, registration ----
  // points (B,N,3) float, lengths (B,) int64?, features (B,N,F) float?, voxel_size [3], point_range [6]? ->
  //   centroids (B,N,3), mean features (B,N,F), new_lengths (B,) int64, point_voxel (B,N) int64 (-1: not counted)
  m.set_python_module("pointops.geometry.downsample");
  m.def("voxel_downsample(Tensor points, Tensor? lengths, Tensor? features, float[] voxel_size, float[]? point_range=None) -> (Tensor points, Tensor features, Tensor lengths, Tensor point_voxel)");
  // points (B,N,3) float, lengths (B,) int64?, neighbors (B,N,K) int64 (-1: none), viewpoints (B,3) float?,
  //   orientation 0 none / 1 toward viewpoint / 2 away from it -> unit normals (B,N,3), curvature (B,N)
  m.set_python_module("pointops.geometry.normals");
  m.def("estimate_normals(Tensor points, Tensor? lengths, Tensor neighbors, Tensor? viewpoints, int orientation=1) -> (Tensor normals, Tensor curvature)");
  // points (B,N,3) float, lengths (B,) int64?, poses (B,H,4,4) float -> points under each pose (B,H,N,3)
  m.set_python_module("pointops.geometry.icp");
  m.def("transform_points(Tensor points, Tensor? lengths, Tensor poses) -> Tensor");
  // sources (B,N,3), source_normals (B,N,3)?, query_lengths (B,)?, targets (B,M,3), target_normals (B,M,3)?, lengths (B,)?,
  //   poses (B,H,4,4) -> every iteration at once: poses (B,H,4,4), rmse (B,H), inlier_fraction (B,H), converged (B,H) bool
  m.def("icp(Tensor sources, Tensor? source_normals, Tensor? query_lengths, Tensor targets, Tensor? target_normals, Tensor? lengths, Tensor poses, int iterations, float max_correspondence_distance, float tolerance=0.0, bool point_to_plane=False, float? max_normal_angle=None, float[]? viewpoint=None, bool centered=False, float? max_step_angle=None, float? max_step_translation=None) -> (Tensor poses, Tensor rmse, Tensor inlier_fraction, Tensor converged)");

  // ---- hough: 2D circles and lines ----
  m.set_python_module("pointops.hough.images");
  // edges (B,H,W) any dtype (nonzero = edge) -> points (B,C,2) int32 (x, y) row-major, -1 padded; lengths (B,) int64  (C = capacity, H*W if -1)
  m.def("edge_points(Tensor edges, int capacity=-1) -> (Tensor points, Tensor lengths)");
  // points (B,P,2) int32/int64 (x, y), lengths (B,) int64?, weights (B,P) float?, gradients (B,P,2) float? -> (B,R,height,width) int32 (float32 if weighted)
  m.def("hough_circles_points(Tensor points, Tensor? lengths, Tensor? weights, Tensor? gradients, int height, int width, int[] radii, float max_angle=0.0) -> Tensor");
  // as hough_circles_points -> best score over radii (B,height,width) int32 (float32 if weighted or normalize), its first radius index (B,height,width) int64
  m.def("hough_circles_max_points(Tensor points, Tensor? lengths, Tensor? weights, Tensor? gradients, int height, int width, int[] radii, float max_angle=0.0, bool normalize=False) -> (Tensor scores, Tensor radius_index)");
  // points (B,P,2) int32/int64 (x, y), lengths (B,) int64?, weights (B,P) float? -> (B, 2 ceil(hypot(height, width)) + 1, T) int32 (float32 if weighted)
  m.def("hough_lines_points(Tensor points, Tensor? lengths, Tensor? weights, int height, int width, float[] theta) -> Tensor");
  // edges (B,H,W) any dtype (nonzero = edge) -> (B,R,H,W) int32: hough_circles_points of the edge pixels
  m.def("hough_circles_map(Tensor edges, int[] radii) -> Tensor");
  // as hough_circles_map -> best score over radii (B,H,W) int32 (float32 if normalize), its first radius index (B,H,W) int64
  m.def("hough_circles_max_map(Tensor edges, int[] radii, bool normalize=False) -> (Tensor scores, Tensor radius_index)");
  // scores (B,H,W) int32/float32, radius_index (B,H,W) int64 -> circles (B,k,3) float32 (x,y,r) NaN padded, votes (B,k) float32
  m.def("circle_detections(Tensor scores, Tensor radius_index, int[] radii, int k, int min_distance, float? threshold) -> (Tensor circles, Tensor votes)");
  // acc (B,n_rho,T) int32/float32 -> lines (B,k,2) float32 (rho,theta) NaN padded, votes (B,k) float32
  m.def("line_detections(Tensor acc, float[] theta, int k, int min_distance, int min_angle, float? threshold, bool glue) -> (Tensor lines, Tensor votes)");

  // ---- ppf: point pair features ----
  m.set_python_module("pointops.ppf.ops");
  // points, normals (B,N,3) float, pairs (B,P,2) int64, lengths (B,) int64?, distance_step (B,) float
  //   -> features (B,P,4) float32 (|d|, three angles), keys (B,P) int64 (-1: none), alpha (B,P) float32
  m.def("ppf_features(Tensor points, Tensor normals, Tensor pairs, Tensor? lengths, Tensor distance_step, int angle_bins, int distance_bins) -> (Tensor features, Tensor keys, Tensor alpha)");
  // points, normals (B,N,3) float, lengths (B,) int64?, diameter (B,) float? -> unit_normals (B,N,3), diameters,
  //   distance_step (B,) float32, key_offsets (B,K+1) int64, unique_keys/starts/counts (B,U) int64, num_unique (B,) int64,
  //   pair_ref/pair_partner (B,P) int32, pair_alpha (B,P) float32  (P = N(N-1), K = keys, U = min(P, K)); a key keeps
  //   at most max_pairs_per_key pairs (0: all)
  m.def("ppf_model(Tensor points, Tensor normals, Tensor? lengths, Tensor? diameter, float tau_d, int angle_bins, int distance_bins, int max_pairs_per_key=0) -> (Tensor unit_normals, Tensor diameters, Tensor distance_step, Tensor key_offsets, Tensor unique_keys, Tensor starts, Tensor counts, Tensor num_unique, Tensor pair_ref, Tensor pair_partner, Tensor pair_alpha)");
  // scene_points, scene_normals (S,N,3) float, scene_lengths (S,) int64?, a ppf_model description of M models
  //   -> votes, model_index, alpha_bin (S,M,R,k) int64, quaternions (S,M,R,k,4), translations (S,M,R,k,3) float32  (R = ceil(N/stride))
  m.def("ppf_vote(Tensor scene_points, Tensor scene_normals, Tensor? scene_lengths, Tensor model_points, Tensor model_normals, Tensor key_offsets, Tensor pair_ref, Tensor pair_alpha, Tensor distance_step, Tensor diameter, int angle_bins, int distance_bins, int stride, int k, bool spread=False, str backend=\"dense\", int chunk_votes=16777216) -> (Tensor votes, Tensor model_index, Tensor alpha_bin, Tensor quaternions, Tensor translations)");
  // quaternions (B,M,4), translations (B,M,3) float, votes (B,M) int64, lengths (B,) int64?, distance_threshold,
  //   suppression_distance (B,) float, suppression_angle in (0, pi] -> cluster quaternions (B,k,4), translations (B,k,3) float32, scores, members, centers (B,k) int64
  m.def("pose_cluster(Tensor quaternions, Tensor translations, Tensor votes, Tensor? lengths, Tensor distance_threshold, float angle_threshold, Tensor suppression_distance, int k, float suppression_angle=3.141592653589793) -> (Tensor cluster_quaternions, Tensor cluster_translations, Tensor scores, Tensor members, Tensor centers)");
}

// Ops whose outputs have no gradient (indices, counts, accumulators, fitted planes): at the
// Autograd key they fall through to the backend kernel, so their outputs never require grad.
// Without this, PyTorch marks the outputs of an op with no autograd kernel as requiring grad
// and a backward through them leaves the inputs' .grad at None with only a warning.
// Differentiable ops (bev_rasterize, pillar_scatter, voxelize, the distances of knn, ...)
// register their backward with torch.library.register_autograd in their family's module instead.
TORCH_LIBRARY_IMPL(pointops, Autograd, m) {
  for (const char* name : {"fps", "fps_packed", "ball_query_packed", "hough_planes", "hough_planes_ball",
                           "hough_peaks", "plane_labels", "plane_refit", "plane_suppress", "plane_detections",
                           "detect_planes", "edge_points", "hough_circles_points",
                           "hough_circles_max_points", "hough_lines_points", "hough_circles_map", "hough_circles_max_map",
                           "circle_detections", "line_detections", "ball_query",
                           "icp", "ppf_features", "ppf_model", "ppf_vote", "pose_cluster"}) {
    m.impl(name, torch::CppFunction::makeFallthrough());
  }
  m.impl("cube_query_packed", torch::CppFunction::makeFallthrough());
}
