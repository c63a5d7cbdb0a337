// Circle accumulators of edge maps on the CPU (rules in circles_map.h): the points path through
// the dispatcher (any device), and the radius chunk table of the CUDA bitmap kernels.
#include "hough/circles_map.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <utility>

#include "common/checks.h"

namespace pointops {
namespace hough_images {

void check_map_args(const at::Tensor& edges, at::IntArrayRef radii, const char* op) {
  check_dim(edges, "edges", 3, "(B, H, W)");
  TORCH_CHECK(!edges.is_complex(), "edges must be a real or bool tensor, got ", edges.scalar_type());
  TORCH_CHECK(edges.size(1) <= kMaxImageSide && edges.size(2) <= kMaxImageSide, "edges must have H and W in [0, ",
              kMaxImageSide, "], got shape ", edges.sizes());
  int64_t offsets = 0;
  for (const int64_t r : radii) {
    TORCH_CHECK(r >= 0 && r <= kMaxRadius, "radii must be in [0, ", kMaxRadius, "], got ", radii);
    offsets += 8 * (r + 1);  // an upper bound of the ring's size
  }
  TORCH_CHECK(offsets <= kMaxCircleOffsets, "radii: the circles of all radii must have at most ", kMaxCircleOffsets,
              " offsets in all, got radii ", radii);
  if (std::string(op) == "hough_circles_map") {
    check_output_fits(edges.device(), std::to_string(radii.size()) + " radii",
                      {edges.size(0), static_cast<int64_t>(radii.size()), edges.size(1), edges.size(2)}, 4);
  }
}

bool bitmap_rings_fit(at::IntArrayRef radii) {
  for (const int64_t r : radii) {
    // ring_size(r) <= 8 (r / sqrt(2) + 2): a cheap bound first, the exact size near the limit
    if (8 * (r * 3 / 4 + 2) > bitmap::kMaxRing && bitmap::ring_size(static_cast<int32_t>(r)) > bitmap::kMaxRing) {
      return false;
    }
  }
  return true;
}

namespace {

struct ChunkCache {
  std::mutex mutex;
  std::map<std::pair<std::vector<int64_t>, int64_t>, ChunkTable> plain, pinned;
};

// Never destroyed, like circles_cpu.cpp's table cache: its pinned tables belong to CUDA's host
// allocator, which may already be torn down when static destructors run at exit.
ChunkCache& chunk_cache() {
  static ChunkCache* cache = new ChunkCache;
  return *cache;
}

ChunkTable build_chunks(at::IntArrayRef radii, int64_t n_chunks) {
  const int64_t n_radii = static_cast<int64_t>(radii.size());
  std::vector<int32_t> ring(n_radii);
  ChunkTable t;
  t.n_chunks = n_chunks;
  for (int64_t i = 0; i < n_radii; ++i) {
    ring[i] = bitmap::ring_size(static_cast<int32_t>(radii[i]));
    t.max_radius = std::max(t.max_radius, static_cast<int32_t>(radii[i]));
    t.max_ring = std::max(t.max_ring, ring[i]);
  }
  // Largest ring first, each to the lightest list with room (ties: the lower list); a radius also
  // costs its setup and fold, ~16 offsets' worth.
  std::vector<int64_t> order(n_radii);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ring[a] > ring[b]; });
  std::vector<std::vector<int64_t>> lists(n_chunks);
  std::vector<int64_t> load(n_chunks, 0);
  for (const int64_t i : order) {
    int64_t best = -1;
    for (int64_t c = 0; c < n_chunks; ++c) {
      if (static_cast<int64_t>(lists[c].size()) >= bitmap::kMaxChunkRadii) continue;
      if (best < 0 || load[c] < load[best]) best = c;
    }
    TORCH_CHECK(best >= 0, "hough_circles_map: ", n_radii, " radii do not fit ", n_chunks, " chunks");
    lists[best].push_back(i);
    load[best] += ring[i] + 16;
  }
  t.data = at::empty({n_chunks + 1 + 4 * n_radii}, at::TensorOptions().dtype(at::kInt));
  int32_t* starts = t.data.data_ptr<int32_t>();
  auto* entries = reinterpret_cast<bitmap::RadiusEntry*>(starts + n_chunks + 1);
  int32_t at = 0;
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::sort(lists[c].begin(), lists[c].end());
    starts[c] = at;
    for (const int64_t i : lists[c]) {
      entries[at++] = bitmap::RadiusEntry{static_cast<int32_t>(radii[i]), ring[i],
                                          bitmap::bit_length(static_cast<uint32_t>(ring[i])), static_cast<int32_t>(i)};
    }
  }
  starts[n_chunks] = at;
  return t;
}

}  // namespace

ChunkTable chunk_table(at::IntArrayRef radii, int64_t n_chunks, bool pinned) {
  ChunkCache& cache = chunk_cache();
  auto key = std::make_pair(std::vector<int64_t>(radii.begin(), radii.end()), n_chunks);
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto& tables = pinned ? cache.pinned : cache.plain;
  auto found = tables.find(key);
  if (found != tables.end()) return found->second;
  if (tables.size() >= 64) tables.clear();  // bounded: a caller sweeping radius lists only rebuilds
  ChunkTable t = build_chunks(radii, n_chunks);
  if (pinned) t.data = t.data.pin_memory();
  tables.emplace(std::move(key), t);
  return t;
}

namespace {

// The point-list ops through the dispatcher, so each backend's kernels run.
std::tuple<at::Tensor, at::Tensor> call_edge_points(const at::Tensor& edges) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("pointops::edge_points", "")
                       .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, int64_t)>();
  return op.call(edges, -1);
}

}  // namespace

at::Tensor hough_circles_map_points(const at::Tensor& edges, at::IntArrayRef radii) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("pointops::hough_circles_points", "")
          .typed<at::Tensor(const at::Tensor&, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                            const std::optional<at::Tensor>&, int64_t, int64_t, at::IntArrayRef, double)>();
  auto [points, lengths] = call_edge_points(edges);
  return op.call(points, lengths, std::nullopt, std::nullopt, edges.size(1), edges.size(2), radii, 0.0);
}

std::tuple<at::Tensor, at::Tensor> hough_circles_max_map_points(const at::Tensor& edges, at::IntArrayRef radii,
                                                                bool normalize) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("pointops::hough_circles_max_points", "")
                       .typed<std::tuple<at::Tensor, at::Tensor>(
                           const at::Tensor&, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                           const std::optional<at::Tensor>&, int64_t, int64_t, at::IntArrayRef, double, bool)>();
  auto [points, lengths] = call_edge_points(edges);
  return op.call(points, lengths, std::nullopt, std::nullopt, edges.size(1), edges.size(2), radii, 0.0, normalize);
}

}  // namespace hough_images

namespace {

at::Tensor hough_circles_map_cpu(const at::Tensor& edges, at::IntArrayRef radii) {
  hough_images::check_map_args(edges, radii, "hough_circles_map");
  return hough_images::hough_circles_map_points(edges, radii);
}

std::tuple<at::Tensor, at::Tensor> hough_circles_max_map_cpu(const at::Tensor& edges, at::IntArrayRef radii,
                                                             bool normalize) {
  hough_images::check_map_args(edges, radii, "hough_circles_max_map");
  TORCH_CHECK(!radii.empty(), "radii must hold at least one radius for hough_circles_max_map");
  return hough_images::hough_circles_max_map_points(edges, radii, normalize);
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CPU, m) {
  m.impl("hough_circles_map", &hough_circles_map_cpu);
  m.impl("hough_circles_max_map", &hough_circles_max_map_cpu);
}

}  // namespace pointops
