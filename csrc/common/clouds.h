// Batch bookkeeping shared by the CPU and CUDA kernels: which rows belong to which cloud.
#pragma once

#include "common/aten.h"

#include <cstdint>
#include <optional>

#include "common/portable_math.h"

namespace pointops {

// An op's optional lengths as its kernels read them: contiguous (undefined when absent) and the
// data pointer (null when absent: every cloud has all N rows).
struct CloudLengths {
  at::Tensor tensor;
  const int64_t* data;
};

inline CloudLengths contiguous_lengths(const std::optional<at::Tensor>& lengths) {
  if (!lengths.has_value()) return {at::Tensor(), nullptr};
  at::Tensor tensor = lengths->contiguous();
  const int64_t* data = tensor.data_ptr<int64_t>();
  return {std::move(tensor), data};
}

// Points in cloud b: lengths[b] clamped to [0, n]; every one of the n rows when lengths is null.
POINTOPS_HOST_DEVICE inline int64_t cloud_length(const int64_t* lengths, int64_t b, int64_t n) {
  if (lengths == nullptr) return n;
  const int64_t v = lengths[b];
  return v < 0 ? 0 : (v > n ? n : v);
}

// Where each cloud of a batch lives among the rows of its points, in either input layout:
//   padded  points (B, N, D), cloud b is rows [b N, b N + lengths[b]) (lengths clamped to [0, N];
//           none: all N); indices within a cloud count from its first row.
//   packed  points (P, D), cloud b is rows [offsets[b], offsets[b+1]) (offsets (B+1,));
//           indices count rows of all P, so they index the packed tensor directly.
// Kernels take it by value and read the lengths / offsets where they live, so a CUDA kernel
// needs no host sync; it cannot check packed offsets either, so it clamps them to [0, P] and
// makes them non-decreasing (a decreasing pair is an empty cloud). A CPU kernel, which can read
// them, should reject malformed offsets instead.
struct CloudLayout {
  const int64_t* counts;   // padded: lengths (B,) or nullptr for all N; packed: offsets (B+1,)
  int64_t rows_per_cloud;  // padded: N; packed: unused
  int64_t total_rows;      // padded: B * N; packed: P
  bool packed;

  // First row of cloud b.
  POINTOPS_HOST_DEVICE int64_t begin(int64_t b) const {
    if (!packed) return b * rows_per_cloud;
    return clamp(counts[b], 0, total_rows);
  }
  // Rows of cloud b.
  POINTOPS_HOST_DEVICE int64_t length(int64_t b) const {
    if (!packed) return cloud_length(counts, b, rows_per_cloud);
    const int64_t first = begin(b);
    return clamp(counts[b + 1], first, total_rows) - first;
  }
  // What turns an index within cloud b into the index the op returns (see above).
  POINTOPS_HOST_DEVICE int64_t index_base(int64_t b) const { return packed ? begin(b) : 0; }

 private:
  POINTOPS_HOST_DEVICE static int64_t clamp(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : (v > hi ? hi : v);
  }
};

// batch clouds of n rows each; lengths (batch,) or nullptr.
inline CloudLayout padded_layout(const int64_t* lengths, int64_t batch, int64_t n) {
  return {lengths, n, batch * n, /*packed=*/false};
}

// Clouds among total_rows packed rows, bounded by offsets (batch + 1,).
inline CloudLayout packed_layout(const int64_t* offsets, int64_t total_rows) {
  return {offsets, 0, total_rows, /*packed=*/true};
}

}  // namespace pointops
