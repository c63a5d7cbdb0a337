// Pose clustering on the CPU: the twin of pose_cluster_cuda.cu (contract in pose_cluster.h).
// One CPU parallel hash array of cell keys for the whole batch, as on CUDA; cluster scores in
// parallel over poses; the selection rounds per batch entry; the averages of the chosen clusters
// walk the same members in the same order as the CUDA kernel.
#include "ppf/pose_cluster.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/hash_array_cpu.h"
#include "ppf/ppf_args.h"

namespace pointops {
namespace ppf {

ClusterArgs check_cluster_args(const at::Tensor& quaternions, const at::Tensor& translations, const at::Tensor& votes,
                               const std::optional<at::Tensor>& lengths, const at::Tensor& distance_threshold,
                               double angle_threshold, const at::Tensor& suppression_distance, int64_t k,
                               double suppression_angle) {
  check_dim(quaternions, "quaternions", 3, "(B, M, 4)");
  check_floating(quaternions, "quaternions");
  TORCH_CHECK(quaternions.size(2) == 4, "quaternions must have shape (B, M, 4), got shape ", quaternions.sizes());
  const int64_t batch = quaternions.size(0);
  const int64_t poses = quaternions.size(1);
  check_floating(translations, "translations");
  check_same_device(translations, "translations", quaternions, "quaternions");
  check_shape(translations, "translations", {batch, poses, 3});
  check_dtype(votes, "votes", at::kLong);
  check_same_device(votes, "votes", quaternions, "quaternions");
  check_shape(votes, "votes", {batch, poses});
  check_optional_batch_vector(lengths, "lengths", batch, quaternions, "quaternions");
  check_cloud_values(distance_threshold, "distance_threshold", batch, quaternions, "quaternions");
  check_cloud_values(suppression_distance, "suppression_distance", batch, quaternions, "quaternions");
  TORCH_CHECK(angle_threshold > 0.0 && angle_threshold <= M_PI, "angle_threshold must be in (0, pi] radians, got ",
              angle_threshold);
  TORCH_CHECK(suppression_angle > 0.0 && suppression_angle <= M_PI,
              "suppression_angle must be in (0, pi] radians, got ", suppression_angle);
  TORCH_CHECK(k >= 0, "k must be >= 0, got ", k);
  check_output_fits(quaternions.device(), "k = " + std::to_string(k), {batch, k}, 7 * 4 + 3 * 8);
  TORCH_CHECK(batch <= kMaxClusterBatch, "pose_cluster takes at most ", kMaxClusterBatch,
              " batch entries (cell keys pack the entry in 12 bits), got ", batch);
  check_fits_int32(batch * poses, "B * M (poses in the batch)");
  const float cos_suppress = suppression_angle >= M_PI ? -1.0f : static_cast<float>(std::cos(suppression_angle / 2.0));
  return {batch, poses, k, static_cast<float>(std::cos(angle_threshold / 2.0)), cos_suppress};
}

ClusterResult empty_cluster_outputs(const at::Tensor& quaternions, const ClusterArgs& args) {
  const auto options = quaternions.options();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  return {at::full({args.batch, args.k, 4}, nan, options.dtype(at::kFloat)),
          at::full({args.batch, args.k, 3}, nan, options.dtype(at::kFloat)),
          at::zeros({args.batch, args.k}, options.dtype(at::kLong)),
          at::zeros({args.batch, args.k}, options.dtype(at::kLong)),
          at::full({args.batch, args.k}, -1, options.dtype(at::kLong))};
}

namespace {

struct CpuTable {
  const HashArrayCpu* h;
  int64_t poses;  // M: flat index = b * M + pose

  int64_t find(int64_t key) const { return hash_array::find_run(h->unique_keys.data(), h->num_unique(), key); }
  int64_t start(int64_t run) const { return h->starts[run]; }
  int64_t count(int64_t run) const { return h->counts[run]; }
  int64_t at(int64_t position) const { return h->perm[position] % poses; }
};

ClusterResult pose_cluster_cpu(const at::Tensor& quaternions, const at::Tensor& translations, const at::Tensor& votes,
                               const std::optional<at::Tensor>& lengths, const at::Tensor& distance_threshold,
                               double angle_threshold, const at::Tensor& suppression_distance, int64_t k,
                               double suppression_angle) {
  const ClusterArgs args = check_cluster_args(quaternions, translations, votes, lengths, distance_threshold,
                                              angle_threshold, suppression_distance, k, suppression_angle);
  ClusterResult out = empty_cluster_outputs(quaternions, args);
  const int64_t batch = args.batch;
  const int64_t poses = args.poses;
  const int64_t total = batch * poses;
  if (total == 0 || k == 0) return out;

  const at::Tensor q = as_float(quaternions);
  const at::Tensor t = as_float(translations);
  const at::Tensor v = votes.contiguous();
  const at::Tensor thresholds = as_float(distance_threshold);
  const at::Tensor suppress = as_float(suppression_distance);
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  const float* q_ptr = q.data_ptr<float>();
  const float* t_ptr = t.data_ptr<float>();
  const int64_t* v_ptr = v.data_ptr<int64_t>();
  const float* thr_ptr = thresholds.data_ptr<float>();
  const float* sup_ptr = suppress.data_ptr<float>();

  auto load = [&](int64_t b, int64_t i) {
    const int64_t e = b * poses + i;
    return load_pose(q_ptr + e * 4, t_ptr + e * 3, v_ptr[e], i < cloud_length(lengths_c.data, b, poses), thr_ptr[b]);
  };

  const int64_t key_bound = batch << (3 * kCellBits);
  std::vector<int64_t> keys(static_cast<size_t>(total));
  at::parallel_for(0, total, 1024, [&](int64_t first, int64_t last) {
    for (int64_t e = first; e < last; ++e) {
      const int64_t b = e / poses;
      const Pose p = load(b, e - b * poses);
      keys[e] = p.valid ? cell_key(b, p.cell[0], p.cell[1], p.cell[2]) : key_bound;
    }
  });
  const HashArrayCpu h = build_hash_array_cpu(keys.data(), total, key_bound);
  const CpuTable table{&h, poses};

  std::vector<int64_t> scores(static_cast<size_t>(total), 0);
  at::parallel_for(0, total, 64, [&](int64_t first, int64_t last) {
    for (int64_t e = first; e < last; ++e) {
      const int64_t b = e / poses;
      const Pose centre = load(b, e - b * poses);
      if (!centre.valid) continue;
      const float max_square = multiply(thr_ptr[b], thr_ptr[b]);
      int64_t score = 0;
      for_each_member(
          centre, b, max_square, args.cos_half, table, [&](int64_t j) { return load(b, j); },
          [&](int64_t, const Pose& p) { score += p.votes; });
      scores[e] = score;
    }
  });

  at::Tensor out_q = std::get<0>(out), out_t = std::get<1>(out), out_scores = std::get<2>(out);
  at::Tensor out_members = std::get<3>(out), out_centers = std::get<4>(out);
  at::parallel_for(0, batch, 1, [&](int64_t first, int64_t last) {
    std::vector<uint8_t> removed(static_cast<size_t>(poses));
    for (int64_t b = first; b < last; ++b) {
      std::fill(removed.begin(), removed.end(), 0);
      const float max_square = multiply(thr_ptr[b], thr_ptr[b]);
      const float suppress_square = multiply(sup_ptr[b], sup_ptr[b]);
      for (int64_t round = 0; round < k; ++round) {
        int64_t best = -1;
        for (int64_t i = 0; i < poses; ++i) {
          const int64_t e = b * poses + i;
          if (removed[i] || scores[e] <= 0) continue;
          if (best < 0 || scores[e] > scores[b * poses + best]) best = i;
        }
        if (best < 0) break;
        const Pose centre = load(b, best);
        for (int64_t i = 0; i < poses; ++i) {
          if (i == best || is_suppressed(centre, load(b, i), suppress_square, args.cos_suppress)) {
            removed[i] = 1;
          }
        }
        ClusterSum sum;
        sum.reset();
        for_each_member(
            centre, b, max_square, args.cos_half, table, [&](int64_t j) { return load(b, j); },
            [&](int64_t, const Pose& p) { sum.add_member(centre, p); });
        const int64_t row = b * k + round;
        sum.write(out_q.data_ptr<float>() + row * 4, out_t.data_ptr<float>() + row * 3);
        out_scores.data_ptr<int64_t>()[row] = sum.score;
        out_members.data_ptr<int64_t>()[row] = sum.members;
        out_centers.data_ptr<int64_t>()[row] = best;
      }
    }
  });
  return out;
}

}  // namespace
}  // namespace ppf

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("pose_cluster", &ppf::pose_cluster_cpu); }

}  // namespace pointops
