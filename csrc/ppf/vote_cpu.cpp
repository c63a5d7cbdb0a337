// PPF voting on the CPU: the twin of vote_cuda.cu (contract in vote.h). Each scene's valid points
// are prepared once (unit normals, a grid of cells a model diameter wide), then the tasks (scene,
// model, reference) are handed to the threads one at a time. A task gathers the points of the
// cells around its reference that lie within the diameter (the distance test 8 points at a time),
// computes their features 8 at a time
// (AVX2, vote_cpu_simd.h, where the CPU has it; the same bits as the scalar steps), looks their
// keys up and votes:
//   dense: an (nm x angle_bins) uint32 accumulator per task, reused across the tasks of a thread,
//          8 vote cells computed at a time; then a scan for the k peaks;
//   sort:  the task's votes as cell keys, counted by the CPU parallel hash array (radix sort +
//          run-length encoding): memory grows with the votes the reference casts.
// Both count the same votes (the set of votes, not their order, decides the integer counts) and
// keep the same peaks.
#include "ppf/vote.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/cpu_simd.h"
#include "common/hash_array_cpu.h"
#include "ppf/ppf_args.h"
#include "ppf/vote_cpu_simd.h"

namespace pointops {
namespace ppf {

VoteShape check_vote_args(const at::Tensor& scene_points, const at::Tensor& scene_normals,
                          const std::optional<at::Tensor>& scene_lengths, const at::Tensor& model_points,
                          const at::Tensor& model_normals, const at::Tensor& key_offsets, const at::Tensor& pair_ref,
                          const at::Tensor& pair_alpha, const at::Tensor& distance_step, const at::Tensor& diameter,
                          int64_t angle_bins, int64_t distance_bins, int64_t stride, int64_t k, bool spread,
                          const std::string& backend, int64_t chunk_votes) {
  check_oriented_clouds(scene_points, scene_normals, scene_lengths, "scene_points", "scene_normals", "scene_lengths");
  check_dim(model_points, "model_points", 3, "(M, Nm, 3)");
  check_dtype(model_points, "model_points", at::kFloat);
  TORCH_CHECK(model_points.size(2) == 3, "model_points must have shape (M, Nm, 3), got shape ", model_points.sizes());
  check_same_device(model_points, "model_points", scene_points, "scene_points");
  check_dtype(model_normals, "model_normals", at::kFloat);
  check_same_device(model_normals, "model_normals", scene_points, "scene_points");
  TORCH_CHECK(model_normals.sizes() == model_points.sizes(), "model_normals must have the shape of model_points ",
              model_points.sizes(), ", got ", model_normals.sizes());
  const int64_t models = model_points.size(0);
  const Binning binning = make_binning(angle_bins, distance_bins);
  TORCH_CHECK(binning.key_count() <= kMaxKeys, "distance_bins * ceil(angle_bins / 2)^3 keys must be at most 2^24, got ",
              binning.key_count());
  check_dtype(key_offsets, "key_offsets", at::kLong);
  check_same_device(key_offsets, "key_offsets", scene_points, "scene_points");
  check_shape(key_offsets, "key_offsets", {models, binning.key_count() + 1});
  check_dtype(pair_ref, "pair_ref", at::kInt);
  check_same_device(pair_ref, "pair_ref", scene_points, "scene_points");
  check_dim(pair_ref, "pair_ref", 2, "(M, P)");
  TORCH_CHECK(pair_ref.size(0) == models, "pair_ref must have shape (M, P) with M = ", models, ", got shape ",
              pair_ref.sizes());
  check_dtype(pair_alpha, "pair_alpha", at::kFloat);
  check_same_device(pair_alpha, "pair_alpha", scene_points, "scene_points");
  check_shape(pair_alpha, "pair_alpha", pair_ref.sizes());
  check_cloud_values(distance_step, "distance_step", models, scene_points, "scene_points");
  check_cloud_values(diameter, "diameter", models, scene_points, "scene_points");
  TORCH_CHECK(stride >= 1, "stride must be >= 1, got ", stride);
  TORCH_CHECK(k >= 0 && k <= kMaxPeaks, "k (peaks per reference) must be in [0, ", kMaxPeaks, "], got ", k);
  TORCH_CHECK(backend == "dense" || backend == "sort", "backend must be \"dense\" or \"sort\", got \"", backend, "\"");
  TORCH_CHECK(chunk_votes >= 1, "chunk_votes must be >= 1, got ", chunk_votes);
  const int64_t nm = model_points.size(1);
  TORCH_CHECK(nm <= 46340, "model_points may have at most 46340 points per model, got ", nm);

  VoteShape shape;
  shape.scenes = scene_points.size(0);
  shape.n = scene_points.size(1);
  shape.models = models;
  shape.nm = nm;
  shape.pairs = pair_ref.size(1);
  shape.stride = stride;
  shape.refs = (shape.n + stride - 1) / stride;
  shape.k = k;
  shape.keys = binning.key_count();
  shape.cells = nm * angle_bins;
  shape.spread = spread;
  shape.binning = binning;
  // per peak: votes, model_index, alpha_bin (int64), a quaternion and a translation (float32)
  check_output_fits(
      scene_points.device(),
      "k = " + std::to_string(k) + " peaks of every " + std::to_string(stride) + "-th scene point (stride)",
      {shape.scenes, models, shape.refs, k}, 3 * 8 + 7 * 4);
  return shape;
}

VoteResult empty_vote_outputs(const at::Tensor& scene_points, const VoteShape& s) {
  const auto options = scene_points.options();
  const std::vector<int64_t> peaks = {s.scenes, s.models, s.refs, s.k};
  return {at::zeros(peaks, options.dtype(at::kLong)), at::full(peaks, -1, options.dtype(at::kLong)),
          at::full(peaks, -1, options.dtype(at::kLong)),
          at::full({s.scenes, s.models, s.refs, s.k, 4}, std::numeric_limits<float>::quiet_NaN(),
                   options.dtype(at::kFloat)),
          at::full({s.scenes, s.models, s.refs, s.k, 3}, std::numeric_limits<float>::quiet_NaN(),
                   options.dtype(at::kFloat))};
}

namespace {

// ---- one scene, prepared once for every model and reference -----------------------------------

// The points of a scene that take part (finite, nonzero finite normal; unit normals computed once,
// as load_oriented computes them), in structure-of-arrays form and sorted into a grid of cubic
// cells at least one model diameter wide: the partners of a reference all lie in the 27 cells
// around its own, so it pairs with those points only (which points, not their order, decides the
// votes: the accumulator's counts are integers).
struct SceneGrid {
  std::vector<float> x, y, z, nx, ny, nz;  // in cell order
  std::vector<int64_t> row;                // the scene row of each
  std::vector<int64_t> start;              // cells + 1: cell c holds [start[c], start[c + 1])
  double origin[3] = {0.0, 0.0, 0.0};
  double width = 1.0;
  double reach = 0.0;  // the largest pair distance, widened past float32 rounding
  int64_t dims[3] = {0, 0, 0};

  int64_t coordinate(float v, int axis) const {
    const double c = std::floor((static_cast<double>(v) - origin[axis]) / width);
    return c < 0.0 ? 0 : (c >= static_cast<double>(dims[axis]) ? dims[axis] - 1 : static_cast<int64_t>(c));
  }
  int64_t cell(int64_t cx, int64_t cy, int64_t cz) const { return (cz * dims[1] + cy) * dims[0] + cx; }
};

// `reach`: the largest pair distance any model accepts (its diameter), widened a little so that
// float32 rounding of |d|^2 <= diameter^2 cannot reach past it. Cells are a third of that wide
// (wider when the cloud's extent would need more than about two cells a point): a reference
// then scans the cells that may hold a point within reach (gather_partners), about 10 reach^3
// of space against the 27 reach^3 of cells one reach wide.
SceneGrid build_scene_grid(const float* points, const float* normals, int64_t length, float reach) {
  SceneGrid g;
  std::vector<int64_t> rows;
  std::vector<Vec3> ps, ns;
  for (int64_t j = 0; j < length; ++j) {
    Vec3 p, n;
    if (!load_oriented(points, normals, length, j, &p, &n)) continue;
    rows.push_back(j);
    ps.push_back(p);
    ns.push_back(n);
  }
  const int64_t count = static_cast<int64_t>(rows.size());
  if (count == 0 || !(reach > 0.0f) || !finite(reach)) return g;
  double lo[3], hi[3];
  for (int a = 0; a < 3; ++a) lo[a] = hi[a] = (&ps[0].x)[a];
  for (const Vec3& p : ps) {
    for (int a = 0; a < 3; ++a) {
      lo[a] = std::min(lo[a], static_cast<double>((&p.x)[a]));
      hi[a] = std::max(hi[a], static_cast<double>((&p.x)[a]));
    }
  }
  g.reach = static_cast<double>(reach) * (1.0 + 1.0 / 1024.0);
  g.width = g.reach / 3.0;
  const double limit = 2.0 * static_cast<double>(count) + 64.0;
  for (;;) {
    double cells = 1.0;
    for (int a = 0; a < 3; ++a) cells *= std::floor((hi[a] - lo[a]) / g.width) + 1.0;
    if (cells <= limit) break;
    g.width *= 1.5;
  }
  for (int a = 0; a < 3; ++a) {
    g.origin[a] = lo[a];
    g.dims[a] = static_cast<int64_t>(std::floor((hi[a] - lo[a]) / g.width)) + 1;
  }
  const int64_t cells = g.dims[0] * g.dims[1] * g.dims[2];
  std::vector<int64_t> cell_of(static_cast<size_t>(count));
  g.start.assign(static_cast<size_t>(cells + 1), 0);
  for (int64_t k = 0; k < count; ++k) {
    const Vec3& p = ps[k];
    cell_of[k] = g.cell(g.coordinate(p.x, 0), g.coordinate(p.y, 1), g.coordinate(p.z, 2));
    ++g.start[cell_of[k] + 1];
  }
  for (int64_t c = 0; c < cells; ++c) g.start[c + 1] += g.start[c];
  std::vector<int64_t> fill(g.start.begin(), g.start.end() - 1);
  for (auto* v : {&g.x, &g.y, &g.z, &g.nx, &g.ny, &g.nz}) v->resize(static_cast<size_t>(count));
  g.row.resize(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    const int64_t at = fill[cell_of[k]]++;
    g.x[at] = ps[k].x;
    g.y[at] = ps[k].y;
    g.z[at] = ps[k].z;
    g.nx[at] = ns[k].x;
    g.ny[at] = ns[k].y;
    g.nz[at] = ns[k].z;
    g.row[at] = rows[k];
  }
  return g;
}

// ---- one reference -------------------------------------------------------------------------------

// A thread's scratch, reused across its references: the partners of a reference (structure of
// arrays, padded to whole vectors), their bins, neighbour bins and alphas, the accumulator.
struct Scratch {
  std::vector<float> px, py, pz, nx, ny, nz;
  std::vector<int32_t> bin, neighbour;  // (4, capacity): dimension-major
  std::vector<float> alpha;
  int64_t capacity = 0;
  std::vector<uint32_t> acc;
  std::vector<int64_t> cells;
  // the lookups of a reference: keys, then their pair-list rows, and the scene alphas
  std::vector<int64_t> keys, lo, hi;
  std::vector<float> lookup_alpha;

  void reserve(int64_t n) {
    if (n <= capacity) return;
    capacity = std::max<int64_t>(n, 2 * capacity);
    for (auto* v : {&px, &py, &pz, &nx, &ny, &nz, &alpha}) v->resize(static_cast<size_t>(capacity));
    bin.resize(static_cast<size_t>(4 * capacity));
    neighbour.resize(static_cast<size_t>(4 * capacity));
  }
};

constexpr int64_t kPad = 8;  // partner lists are padded to whole AVX2 vectors

// Copies the points [first, last) of the grid with 0 < |d|^2 <= max_square, d = p - f.p as the
// scalar pair computes it, into the scratch from `count` on; returns the new count.
int64_t gather_range(const SceneGrid& g, const Frame& f, int64_t ref, float max_square, int64_t first, int64_t last,
                     bool vector_path, int64_t count, Scratch* s) {
  s->reserve(count + (last - first) + kPad);
  auto keep = [&](int64_t k) {
    if (g.row[k] == ref) return;
    s->px[count] = g.x[k];
    s->py[count] = g.y[k];
    s->pz[count] = g.z[k];
    s->nx[count] = g.nx[k];
    s->ny[count] = g.ny[k];
    s->nz[count] = g.nz[k];
    ++count;
  };
  int64_t k = first;
#if POINTOPS_X86_DISPATCH
  if (vector_path) {
    // the reference itself has |d|^2 = 0 (its frame's point is its grid point), so the distance
    // test alone leaves it out
    const float* src[6] = {g.x.data(), g.y.data(), g.z.data(), g.nx.data(), g.ny.data(), g.nz.data()};
    float* dst[6] = {s->px.data(), s->py.data(), s->pz.data(), s->nx.data(), s->ny.data(), s->nz.data()};
    for (; k + avx2::kLanes <= last; k += avx2::kLanes) {
      const int mask = avx2::within(f.p, src[0] + k, src[1] + k, src[2] + k, max_square);
      if (mask != 0) count += avx2::pack<6>(mask, src, k, dst, count);
    }
  }
#endif
  for (; k < last; ++k) {
    const Vec3 d = sub3({g.x[k], g.y[k], g.z[k]}, f.p);
    const float square = dot3(d, d);
    if (square > 0.0f && square <= max_square) keep(k);
  }
  return count;
}

// The scene points with 0 < |d|^2 <= max_square and d = p - f.p as the scalar pair computes it,
// copied into the scratch; returns their number. Only the cells that may hold a point within the
// grid's reach are scanned: a point `o` cells away along an axis (|o| >= 1) is more than
// (|o| - 1) cell widths away along it, so a row of cells along x at offsets (oy, oz) is skipped
// when those gaps alone exceed the reach, and otherwise scanned over the x offsets the rest of
// the reach allows (one contiguous run of points).
int64_t gather_partners(const SceneGrid& g, const Frame& f, int64_t ref, float max_square, bool vector_path,
                        Scratch* s) {
  if (g.start.empty()) return 0;
  const int64_t c[3] = {g.coordinate(f.p.x, 0), g.coordinate(f.p.y, 1), g.coordinate(f.p.z, 2)};
  const int64_t span = static_cast<int64_t>(std::ceil(g.reach / g.width));
  const double reach2 = g.reach * g.reach;
  auto gap = [&](int64_t o) {
    const double cells = static_cast<double>(o < 0 ? -o : o) - 1.0;
    return cells > 0.0 ? cells * g.width : 0.0;
  };
  int64_t count = 0;
  for (int64_t z = std::max<int64_t>(c[2] - span, 0); z <= std::min<int64_t>(c[2] + span, g.dims[2] - 1); ++z) {
    const double gz = gap(z - c[2]);
    for (int64_t y = std::max<int64_t>(c[1] - span, 0); y <= std::min<int64_t>(c[1] + span, g.dims[1] - 1); ++y) {
      const double gy = gap(y - c[1]);
      const double rest = reach2 - gy * gy - gz * gz;
      if (!(rest > 0.0)) continue;
      const int64_t ox = static_cast<int64_t>(std::ceil(std::sqrt(rest) / g.width));
      const int64_t x0 = std::max<int64_t>(c[0] - ox, 0), x1 = std::min<int64_t>(c[0] + ox, g.dims[0] - 1);
      count = gather_range(g, f, ref, max_square, g.start[g.cell(x0, y, z)], g.start[g.cell(x1, y, z) + 1], vector_path,
                           count, s);
    }
  }
  s->reserve(count + kPad);
  for (int64_t k = count; k < count + kPad; ++k) {  // padding lanes: any finite values
    s->px[k] = s->py[k] = s->pz[k] = 0.0f;
    s->nx[k] = 1.0f;
    s->ny[k] = s->nz[k] = 0.0f;
  }
  return count;
}

// Bins, neighbour bins (the vector path: only with spread, which alone reads them) and alphas of
// the gathered partners (oriented_scene_pair's arithmetic).
void partner_features(const Frame& f, const Binning& b, int64_t count, bool spread, bool vector_path, Scratch* s) {
  const int64_t stride = s->capacity;
#if POINTOPS_X86_DISPATCH
  if (vector_path) {
    auto features = spread ? &avx2::partner_features<true> : &avx2::partner_features<false>;
    features(f, b, count, s->px.data(), s->py.data(), s->pz.data(), s->nx.data(), s->ny.data(), s->nz.data(),
             s->bin.data(), s->neighbour.data(), s->alpha.data(), stride);
    return;
  }
#endif
  for (int64_t k = 0; k < count; ++k) {
    ScenePair pair;
    const Vec3 p = {s->px[k], s->py[k], s->pz[k]};
    const Vec3 n = {s->nx[k], s->ny[k], s->nz[k]};
    // every partner passed the distance test, so only the distance bin can reject it
    if (!oriented_scene_pair(f, p, n, std::numeric_limits<float>::infinity(), b, &pair)) {
      s->bin[k] = -1;
      continue;
    }
    for (int q = 0; q < 4; ++q) {
      s->bin[q * stride + k] = pair.bins.dim[q].bin;
      s->neighbour[q * stride + k] = pair.bins.dim[q].neighbour;
    }
    s->alpha[k] = pair.alpha;
  }
}

// Calls rows(lo, hi, scene_alpha) for the pair-list rows of every lookup of every partner, in
// partner order. The lookups are listed first, so that the key table's rows and then the pair
// rows can be fetched ahead of their use: both are read at scattered places, far more than fit
// in the caches near the core, and waiting for them is most of the lookups' time.
template <typename Rows>
void partner_lookups(Scratch* s, int64_t count, const Binning& b, bool spread, const int64_t* offsets,
                     const int32_t* pair_ref, const float* pair_alpha, int64_t pairs, Rows&& rows) {
  constexpr int64_t kKeysAhead = 16, kRowsAhead = 4;
  const int64_t stride = s->capacity;
  const int lookups = spread ? 16 : 1;
  s->keys.clear();
  s->lookup_alpha.clear();
  for (int64_t k = 0; k < count; ++k) {
    if (s->bin[k] < 0) continue;  // distance bin past the last
    ScenePair pair;
    for (int q = 0; q < 4; ++q) {
      pair.bins.dim[q] = {s->bin[q * stride + k], spread ? s->neighbour[q * stride + k] : -1};
    }
    pair.bins.valid = true;
    pair.alpha = s->alpha[k];
    for (int mask = 0; mask < lookups; ++mask) {
      const int64_t key = lookup_key(pair, mask, b.feature_bins);
      if (key < 0) continue;
      s->keys.push_back(key);
      s->lookup_alpha.push_back(pair.alpha);
    }
  }
  const int64_t total = static_cast<int64_t>(s->keys.size());
  s->lo.resize(static_cast<size_t>(total));
  s->hi.resize(static_cast<size_t>(total));
  const int64_t* keys = s->keys.data();
  int64_t found = 0;  // lookups with rows, compacted in place (their alphas too)
  for (int64_t t = 0; t < total; ++t) {
    if (t + kKeysAhead < total) __builtin_prefetch(offsets + keys[t + kKeysAhead]);
    int64_t lo, hi;
    key_rows(offsets, keys[t], pairs, &lo, &hi);
    if (lo >= hi) continue;
    s->lo[found] = lo;
    s->hi[found] = hi;
    s->lookup_alpha[found] = s->lookup_alpha[t];
    ++found;
  }
  for (int64_t t = 0; t < found; ++t) {
    if (t + kRowsAhead < found) {
      __builtin_prefetch(pair_ref + s->lo[t + kRowsAhead]);
      __builtin_prefetch(pair_alpha + s->lo[t + kRowsAhead]);
    }
    rows(s->lo[t], s->hi[t], s->lookup_alpha[t]);
  }
}

VoteResult ppf_vote_cpu(const at::Tensor& scene_points, const at::Tensor& scene_normals,
                        const std::optional<at::Tensor>& scene_lengths, const at::Tensor& model_points,
                        const at::Tensor& model_normals, const at::Tensor& key_offsets, const at::Tensor& pair_ref,
                        const at::Tensor& pair_alpha, const at::Tensor& distance_step, const at::Tensor& diameter,
                        int64_t angle_bins, int64_t distance_bins, int64_t stride, int64_t k, bool spread,
                        c10::string_view backend_view, int64_t chunk_votes) {
  const std::string backend(backend_view);
  const VoteShape s = check_vote_args(scene_points, scene_normals, scene_lengths, model_points, model_normals,
                                      key_offsets, pair_ref, pair_alpha, distance_step, diameter, angle_bins,
                                      distance_bins, stride, k, spread, backend, chunk_votes);
  VoteResult out = empty_vote_outputs(scene_points, s);
  const int64_t tasks = s.scenes * s.models * s.refs;
  if (tasks == 0 || s.k == 0) return out;
  at::Tensor votes = std::get<0>(out);
  at::Tensor model_index = std::get<1>(out);
  at::Tensor alpha_bin = std::get<2>(out);
  at::Tensor quaternions = std::get<3>(out);
  at::Tensor translations = std::get<4>(out);

  const VoteInputs in = vote_inputs(scene_points, scene_normals, scene_lengths, model_points, model_normals,
                                    key_offsets, pair_ref, pair_alpha, distance_step, diameter);
  const AlphaTable table = make_alpha_table(angle_bins);
  const bool dense = backend == "dense";
#if POINTOPS_X86_DISPATCH
  const bool vector_path = cpu_has_avx2_fma();
#else
  const bool vector_path = false;
#endif

  // Which models vote at all, and the largest diameter among them (the grids' reach).
  const float* step_ptr = in.distance_step.data_ptr<float>();
  const float* diameter_ptr = in.diameter.data_ptr<float>();
  std::vector<char> usable(static_cast<size_t>(s.models));
  float reach = 0.0f;
  for (int64_t m = 0; m < s.models; ++m) {
    usable[m] = step_ptr[m] > 0.0f && finite(step_ptr[m]) && finite(diameter_ptr[m]) && s.pairs > 0;
    if (usable[m]) reach = std::max(reach, std::abs(diameter_ptr[m]));
  }
  std::vector<SceneGrid> grids(static_cast<size_t>(s.scenes));
  at::parallel_for(0, s.scenes, 1, [&](int64_t first, int64_t last) {
    for (int64_t scene = first; scene < last; ++scene) {
      grids[scene] = build_scene_grid(in.scene_points.data_ptr<float>() + scene * s.n * 3,
                                      in.scene_normals.data_ptr<float>() + scene * s.n * 3,
                                      cloud_length(in.scene_lengths.data, scene, s.n), reach);
    }
  });

  // Tasks (scene, model, reference), reference fastest, handed out one at a time: their cost
  // varies with the partners each reference has.
  std::atomic<int64_t> next{0};
  const int64_t workers = std::min<int64_t>(at::get_num_threads(), tasks);
  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    Scratch scratch;
    for (int64_t task = next++; task < tasks; task = next++) {
      const int64_t r = task % s.refs;
      const int64_t m = (task / s.refs) % s.models;
      const int64_t scene = task / (s.refs * s.models);
      const int64_t length = cloud_length(in.scene_lengths.data, scene, s.n);
      const int64_t ref = r * s.stride;
      Frame f{};
      TopWords top;
      top.reset(static_cast<int>(s.k));
      Binning binning = s.binning;
      binning.distance_step = step_ptr[m];
      if (usable[m] && load_reference(in.scene_points.data_ptr<float>() + scene * s.n * 3,
                                      in.scene_normals.data_ptr<float>() + scene * s.n * 3, length, ref, &f)) {
        const float max_square = multiply(diameter_ptr[m], diameter_ptr[m]);
        const int64_t* off = in.key_offsets.data_ptr<int64_t>() + m * (s.keys + 1);
        const int32_t* pr = in.pair_ref.data_ptr<int32_t>() + m * s.pairs;
        const float* pa = in.pair_alpha.data_ptr<float>() + m * s.pairs;
        const int64_t count = gather_partners(grids[scene], f, ref, max_square, vector_path, &scratch);
        partner_features(f, binning, count, s.spread, vector_path, &scratch);
        const int32_t nm = static_cast<int32_t>(s.nm);
        if (dense) {
          scratch.acc.assign(static_cast<size_t>(s.cells), 0u);
          uint32_t* acc = scratch.acc.data();
#if POINTOPS_X86_DISPATCH
          if (vector_path) {
            partner_lookups(
                &scratch, count, binning, s.spread, off, pr, pa, s.pairs,
                [&](int64_t lo, int64_t hi, float alpha) { avx2::vote_rows(pr, pa, lo, hi, alpha, nm, binning, acc); });
            avx2::scan_peaks(acc, s.cells, &top);
          }
#endif
          if (!vector_path) {
            partner_lookups(&scratch, count, binning, s.spread, off, pr, pa, s.pairs,
                            [&](int64_t lo, int64_t hi, float alpha) {
                              for (int64_t e = lo; e < hi; ++e) {
                                const int64_t cell = vote_cell(pr[e], pa[e], alpha, s.nm, binning);
                                if (cell >= 0) ++acc[cell];
                              }
                            });
            for (int64_t c = 0; c < s.cells; ++c) {
              if (acc[c] > 0) top.push(peak_word(acc[c], static_cast<uint32_t>(c)));
            }
          }
        } else {
          std::vector<int64_t>& cells = scratch.cells;
          cells.clear();
          partner_lookups(&scratch, count, binning, s.spread, off, pr, pa, s.pairs,
                          [&](int64_t lo, int64_t hi, float alpha) {
                            for (int64_t e = lo; e < hi; ++e) {
                              const int64_t cell = vote_cell(pr[e], pa[e], alpha, s.nm, binning);
                              if (cell >= 0) cells.push_back(cell);
                            }
                          });
          const HashArrayCpu h = build_hash_array_cpu(cells.data(), static_cast<int64_t>(cells.size()), s.cells);
          for (int64_t run = 0; run < h.num_unique(); ++run) {
            top.push(peak_word(static_cast<uint32_t>(h.counts[run]), static_cast<uint32_t>(h.unique_keys[run])));
          }
        }
      }
      const float* model_p = in.model_points.data_ptr<float>() + m * s.nm * 3;
      const float* model_n = in.model_normals.data_ptr<float>() + m * s.nm * 3;
      for (int64_t q = 0; q < s.k; ++q) {
        const int64_t row = task * s.k + q;
        write_peak(top.word[q], f, model_p, model_n, s.binning.angle_bins, table, votes.data_ptr<int64_t>() + row,
                   model_index.data_ptr<int64_t>() + row, alpha_bin.data_ptr<int64_t>() + row,
                   quaternions.data_ptr<float>() + row * 4, translations.data_ptr<float>() + row * 3);
      }
    }
  });
  return out;
}

}  // namespace
}  // namespace ppf

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("ppf_vote", &ppf::ppf_vote_cpu); }

}  // namespace pointops
