// Circle accumulators of edge maps: the contract shared by the CPU and CUDA kernels.
//
// hough_circles_map(edges, radii) -> acc
//   edges   (B, H, W) any dtype; a pixel is an edge iff it is nonzero (NaN counts). H, W <= 32767.
//   radii   R ints in [0, 32767], any order, repeats allowed.
//   acc     (B, R, H, W) int32: hough_circles_points(*edge_points(edges), H, W, radii), bit for bit.
//
// hough_circles_max_map(edges, radii, normalize) -> (scores, radius_index)
//   hough_circles_max_points(*edge_points(edges), H, W, radii, normalize=normalize), bit for bit (R >= 1):
//   scores (B, H, W) int32 (float32 if normalize), radius_index (B, H, W) int64.
//
// The implementation, per device (the same results on both):
//   CPU   edge_points, then the point-list kernels (circles.h), through the dispatcher;
//   CUDA  the bitmap kernels (circles_map_cuda.cu): the edge map packed into bits and every word
//         of 32 centres counting its ring's votes with bit-sliced adders (circle_bitmap.h). Sizes
//         they do not cover (rings of 65,536 offsets or more, more than 2,048 radii, bands too
//         tall for shared memory) take the CPU's path, on the GPU.
//
// Radius chunks (bitmap path): the radii are dealt to n_chunks lists, largest ring first to the
// lightest list (so the lists cost about the same), each list in ascending index order; a list
// is a warp's work, and its per-centre best (ties: the earliest position, i.e. the lowest index)
// meets the other lists' through the 64-bit key (ordered score << 32 | ~index).
#pragma once

#include "common/aten.h"

#include <cstdint>
#include <vector>

#include "hough/circle_bitmap.h"

namespace pointops {
namespace hough_images {

constexpr int64_t kMaxChunks = 8;

// Checks shared by both backends (defined in circles_map_cpu.cpp).
void check_map_args(const at::Tensor& edges, at::IntArrayRef radii, const char* op);

struct ChunkTable {
  at::Tensor data;  // int32 CPU: starts [n_chunks + 1], then RadiusEntry rows (4 ints each)
  int64_t n_chunks = 0;
  int32_t max_radius = 0, max_ring = 0;
  const int32_t* starts() const { return data.data_ptr<int32_t>(); }
  const bitmap::RadiusEntry* entries() const {
    return reinterpret_cast<const bitmap::RadiusEntry*>(starts() + n_chunks + 1);
  }
};

// The chunk lists of `radii` (cached per (radii, n_chunks); pinned = page-locked, for
// stream-ordered copies to a GPU). Defined in circles_map_cpu.cpp.
ChunkTable chunk_table(at::IntArrayRef radii, int64_t n_chunks, bool pinned);

// Whether the bitmap kernels count rings of these radii exactly (each below 2^16 offsets), and the
// fewest chunks that keep every list within 256 radii (their positions are bytes).
bool bitmap_rings_fit(at::IntArrayRef radii);
inline int64_t min_chunks(int64_t n_radii) { return (n_radii + bitmap::kMaxChunkRadii - 1) / bitmap::kMaxChunkRadii; }

// The points path, on the edges' device (defined in circles_map_cpu.cpp).
at::Tensor hough_circles_map_points(const at::Tensor& edges, at::IntArrayRef radii);
std::tuple<at::Tensor, at::Tensor> hough_circles_max_map_points(const at::Tensor& edges, at::IntArrayRef radii,
                                                                bool normalize);

}  // namespace hough_images
}  // namespace pointops
