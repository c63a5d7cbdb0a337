// Circle accumulators of edge maps on the CPU (rules in circles_map.h): the points path through
// the dispatcher (any device), the radius chunk table both backends' bitmap paths read, and a
// CPU emulation of the CUDA bitmap kernels (POINTOPS_CIRCLES_VARIANT=bitmap): the same
// Bresenham walk, carry-save counters, transposes and chunk lists, one word of 32 centres at a
// time, so that the CPU tests check the arithmetic the GPU kernels run.
#include "hough/circles_map.h"

#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <utility>

#include "common/argmax_key.h"
#include "common/checks.h"

namespace pointops {
namespace hough2d {

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
  TORCH_CHECK(offsets <= kMaxCircleOffsets, "radii: the circles of all radii must have at most ",
              kMaxCircleOffsets, " offsets in all, got radii ", radii);
  if (std::string(op) == "hough_circles_map") {
    check_output_fits(edges.device(), std::to_string(radii.size()) + " radii", {edges.size(0),
                      static_cast<int64_t>(radii.size()), edges.size(1), edges.size(2)}, 4);
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
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("pointops::hough_circles", "")
                       .typed<at::Tensor(const at::Tensor&, const std::optional<at::Tensor>&,
                                         const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, int64_t,
                                         int64_t, at::IntArrayRef, double)>();
  auto [points, lengths] = call_edge_points(edges);
  return op.call(points, lengths, std::nullopt, std::nullopt, edges.size(1), edges.size(2), radii, 0.0);
}

std::tuple<at::Tensor, at::Tensor> hough_circles_max_map_points(const at::Tensor& edges, at::IntArrayRef radii,
                                                                bool normalize) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("pointops::hough_circles_max", "")
                       .typed<std::tuple<at::Tensor, at::Tensor>(
                           const at::Tensor&, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                           const std::optional<at::Tensor>&, int64_t, int64_t, at::IntArrayRef, double, bool)>();
  auto [points, lengths] = call_edge_points(edges);
  return op.call(points, lengths, std::nullopt, std::nullopt, edges.size(1), edges.size(2), radii, 0.0, normalize);
}

}  // namespace hough2d

namespace {

using hough2d::ChunkTable;
namespace bitmap = hough2d::bitmap;

// One image's edge bits with a zero border: rows [-pad, H + pad), words [-left, WW + right), so a
// fetch never leaves the array (the CUDA kernels' shared band, for the whole image).
struct Band {
  std::vector<uint32_t> words;
  int64_t stride = 0;
  int32_t pad = 0, left = 0, n_words = 0;

  Band(const bool* image, int32_t height, int32_t width, int32_t r_max) {
    n_words = (width + 31) / 32;
    pad = r_max;
    left = (r_max + 31) / 32;
    const int32_t right = r_max / 32 + 1;
    stride = left + n_words + right;
    words.assign(static_cast<size_t>((int64_t{height} + 2 * pad) * stride), 0u);
    for (int32_t y = 0; y < height; ++y) {
      uint32_t* row = words.data() + (int64_t{y} + pad) * stride + left;
      for (int32_t x = 0; x < width; ++x) {
        if (image[int64_t{y} * width + x]) row[x / 32] |= 1u << (x % 32);
      }
    }
  }
  int64_t base(int32_t y, int32_t w) const { return (int64_t{y} + pad) * stride + left + w; }
};

struct BandFetch {
  using Row = const uint32_t*;
  struct Pair {
    uint32_t lo = 0, hi = 0;
  };
  static constexpr int32_t kWordStep = 1;  // addresses in words
  Row base;                                // the word of centres' own pixels
  int32_t row_step;
  Row row(int32_t offset) const { return base + offset; }
  Pair load(Row row, int32_t q) const { return Pair{row[q], row[q + 1]}; }
  static uint32_t shift(Pair pair, int32_t s) { return bitmap::funnel(pair.lo, pair.hi, s); }
  uint32_t operator()(Row row, int32_t q, int32_t s) const { return shift(load(row, q), s); }
};

// The chunk count the CUDA kernels would pick for a large image (their largest), at least the
// fewest that hold the radii; the emulation then walks the same lists.
int64_t emulated_chunks(int64_t n_radii) {
  return std::max<int64_t>(std::min<int64_t>(hough2d::kMaxChunks, n_radii), hough2d::min_chunks(n_radii));
}

bool bitmap_usable(at::IntArrayRef radii) {
  return hough2d::bitmap_rings_fit(radii) && hough2d::min_chunks(static_cast<int64_t>(radii.size())) <= hough2d::kMaxChunks;
}

template <bool kReuse>
at::Tensor emulate_map(const at::Tensor& edges, at::IntArrayRef radii) {
  const int64_t batch = edges.size(0), height = edges.size(1), width = edges.size(2);
  const int64_t n_radii = static_cast<int64_t>(radii.size());
  at::Tensor acc = at::zeros({batch, n_radii, height, width}, edges.options().dtype(at::kInt));
  if (acc.numel() == 0) return acc;
  const at::Tensor on = edges.ne(0).contiguous();  // NaN != 0: an edge
  const ChunkTable table = hough2d::chunk_table(radii, emulated_chunks(n_radii), false);
  const int32_t n_words = static_cast<int32_t>((width + 31) / 32);
  int32_t* out = acc.data_ptr<int32_t>();
  at::parallel_for(0, batch, 1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const Band band(on.data_ptr<bool>() + b * height * width, static_cast<int32_t>(height),
                      static_cast<int32_t>(width), table.max_radius);
      for (int32_t y = 0; y < height; ++y) {
        for (int32_t w = 0; w < n_words; ++w) {
          const BandFetch fetch{band.words.data() + band.base(y, w), static_cast<int32_t>(band.stride)};
          for (int64_t e = 0; e < table.starts()[table.n_chunks]; ++e) {
            const bitmap::RadiusEntry& radius = table.entries()[e];
            uint32_t p[bitmap::kPlanes];
            bitmap::ring_counts<kReuse>(radius.r, radius.planes, fetch, p);
            bitmap::transpose16(p);
            int32_t* row = out + ((b * n_radii + radius.index) * height + y) * width;
            for (int j = 0; j < 32 && 32 * w + j < width; ++j) row[32 * w + j] = static_cast<int32_t>(bitmap::count_of(p, j));
          }
        }
      }
    }
  });
  return acc;
}

template <bool kReuse>
std::tuple<at::Tensor, at::Tensor> emulate_max_map(const at::Tensor& edges, at::IntArrayRef radii, bool normalize) {
  const int64_t batch = edges.size(0), height = edges.size(1), width = edges.size(2);
  const int64_t n_radii = static_cast<int64_t>(radii.size());
  at::Tensor scores = at::empty({batch, height, width}, edges.options().dtype(normalize ? at::kFloat : at::kInt));
  at::Tensor index = at::empty({batch, height, width}, edges.options().dtype(at::kLong));
  if (scores.numel() == 0) return {scores, index};
  const at::Tensor on = edges.ne(0).contiguous();
  const ChunkTable table = hough2d::chunk_table(radii, emulated_chunks(n_radii), false);
  const int32_t n_words = static_cast<int32_t>((width + 31) / 32);
  uint32_t* score_bits = reinterpret_cast<uint32_t*>(scores.data_ptr());
  int64_t* index_out = index.data_ptr<int64_t>();
  at::parallel_for(0, batch, 1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const Band band(on.data_ptr<bool>() + b * height * width, static_cast<int32_t>(height),
                      static_cast<int32_t>(width), table.max_radius);
      for (int32_t y = 0; y < height; ++y) {
        for (int32_t w = 0; w < n_words; ++w) {
          const BandFetch fetch{band.words.data() + band.base(y, w), static_cast<int32_t>(band.stride)};
          uint64_t best[32] = {};
          for (int64_t c = 0; c < table.n_chunks; ++c) {
            const int32_t first_entry = table.starts()[c], end_entry = table.starts()[c + 1];
            if (first_entry == end_entry) continue;
            const bitmap::RadiusEntry* list = table.entries() + first_entry;
            auto meet = [&](int j, uint32_t key, uint32_t position) {
              const uint64_t full = argmax_key(key, static_cast<uint32_t>(list[position].index));
              best[j] = std::max(best[j], full);
            };
            uint32_t p[bitmap::kPlanes];
            if (normalize) {
              bitmap::BestScores s;
              s.clear();
              for (int32_t e = 0; e < end_entry - first_entry; ++e) {
                bitmap::ring_counts<kReuse>(list[e].r, list[e].planes, fetch, p);
                s.fold(p, list[e].ring, static_cast<uint32_t>(e));
              }
              s.emit(meet);
            } else {
              bitmap::BestPlanes s;
              s.clear();
              for (int32_t e = 0; e < end_entry - first_entry; ++e) {
                bitmap::ring_counts<kReuse>(list[e].r, list[e].planes, fetch, p);
                s.fold(p, static_cast<uint32_t>(e));
              }
              s.emit(meet);
            }
          }
          for (int j = 0; j < 32 && 32 * w + j < width; ++j) {
            const int64_t i = (b * height + y) * width + 32 * w + j;
            score_bits[i] = hough2d::unordered_bits(static_cast<uint32_t>(best[j] >> 32), normalize);
            index_out[i] = static_cast<int64_t>(0xffffffffu - static_cast<uint32_t>(best[j]));
          }
        }
      }
    }
  });
  return {scores, index};
}

at::Tensor hough_circles_map_cpu(const at::Tensor& edges, at::IntArrayRef radii) {
  hough2d::check_map_args(edges, radii, "hough_circles_map");
  const std::string variant = hough2d::circles_variant(/*cuda=*/false);
  if (variant != "points" && bitmap_usable(radii)) {
    return variant == "bitmap_reuse" ? emulate_map<true>(edges, radii) : emulate_map<false>(edges, radii);
  }
  return hough2d::hough_circles_map_points(edges, radii);
}

std::tuple<at::Tensor, at::Tensor> hough_circles_max_map_cpu(const at::Tensor& edges, at::IntArrayRef radii,
                                                             bool normalize) {
  hough2d::check_map_args(edges, radii, "hough_circles_max_map");
  TORCH_CHECK(!radii.empty(), "radii must hold at least one radius for hough_circles_max_map");
  const std::string variant = hough2d::circles_variant(/*cuda=*/false);
  if (variant != "points" && bitmap_usable(radii)) {
    return variant == "bitmap_reuse" ? emulate_max_map<true>(edges, radii, normalize)
                                     : emulate_max_map<false>(edges, radii, normalize);
  }
  return hough2d::hough_circles_max_map_points(edges, radii, normalize);
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CPU, m) {
  m.impl("hough_circles_map", &hough_circles_map_cpu);
  m.impl("hough_circles_max_map", &hough_circles_max_map_cpu);
}

}  // namespace pointops
