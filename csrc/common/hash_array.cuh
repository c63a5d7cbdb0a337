// The parallel hash array on CUDA (contract in hash_array.h; the CPU twin is hash_array_cpu.h):
// radix sort of (key, index) pairs, run-length encoding, exclusive scan, binary-search lookup.
// Everything runs on the current stream with scratch from torch's caching allocator, and
// nothing is read back to the host: outputs have capacity n and the count stays on the device.
//
//   HashArray h = build_hash_array(keys, key_bound);  // keys (n,) int64 CUDA, n <= INT_MAX
//   kernel<<<...>>>(h.view(), ...);                    // view.find(key), view.num_unique[0]
//
// Entries past num_unique are unspecified (counts there are 0). The exclusive_sum and
// cub_call helpers below are the building blocks, for callers that need one more scan.
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include "common/aten.h"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "common/hash_array.h"

namespace pointops {
namespace cuda {

// Two-phase CUB call: the size query, then the real call with temporary storage from torch's
// caching allocator. `call(temp, bytes)` must launch on the current stream; the storage is
// released stream-ordered, so no sync is needed.
template <typename Call>
void cub_call(const at::Device& device, Call&& call) {
  size_t bytes = 0;
  C10_CUDA_CHECK(call(nullptr, bytes));
  const at::Tensor temp = at::empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))},
                                    at::TensorOptions().device(device).dtype(at::kByte));
  C10_CUDA_CHECK(call(temp.data_ptr(), bytes));
}

// CUB's device algorithms used here count items in int.
inline void check_cub_items(int64_t n, const char* what) {
  TORCH_CHECK(n <= INT_MAX, what, ": at most ", INT_MAX, " items fit one CUB call, got ", n);
}

// out[i] = in[0] + ... + in[i-1] for i < n (n <= INT_MAX; the sum must fit int32).
inline void exclusive_sum(const int32_t* in, int32_t* out, int64_t n, const at::Device& device) {
  check_cub_items(n, "exclusive_sum");
  if (n == 0) return;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  cub_call(device, [&](void* temp, size_t& bytes) {
    return cub::DeviceScan::ExclusiveSum(temp, bytes, in, out, static_cast<int>(n), stream);
  });
}

// Raw pointers for kernels.
struct HashArrayView {
  const int64_t* sorted_keys;
  const int32_t* perm;
  const int64_t* unique_keys;
  const int32_t* counts;
  const int32_t* starts;
  const int64_t* num_unique;  // one value

  __device__ int64_t find(int64_t key) const { return hash_array::find_run(unique_keys, *num_unique, key); }
};

struct HashArray {
  at::Tensor sorted_keys;  // (n,) int64
  at::Tensor perm;         // (n,) int32
  at::Tensor unique_keys;  // (n,) int64, the first num_unique valid
  at::Tensor counts;       // (n,) int32, the first num_unique valid, 0 past the runs
  at::Tensor starts;       // (n,) int32, the first num_unique valid
  at::Tensor num_unique;   // (1,) int64

  HashArrayView view() const {
    return {sorted_keys.data_ptr<int64_t>(), perm.data_ptr<int32_t>(),   unique_keys.data_ptr<int64_t>(),
            counts.data_ptr<int32_t>(),      starts.data_ptr<int32_t>(), num_unique.data_ptr<int64_t>()};
  }
};

// Run-length encoding also counted the run of invalid keys (key_bound), which sorts last.
template <typename key_t>
__global__ void drop_invalid_run_kernel(const key_t* unique_keys, int64_t* num_unique, key_t key_bound) {
  const int64_t runs = *num_unique;
  if (runs > 0 && unique_keys[runs - 1] == key_bound) *num_unique = runs - 1;
}

// keys: (n,) int64 on a CUDA device, values in [0, key_bound], key_bound = invalid.
inline HashArray build_hash_array(const at::Tensor& keys, int64_t key_bound) {
  TORCH_INTERNAL_ASSERT(keys.is_cuda() && keys.scalar_type() == at::kLong && keys.dim() == 1 && keys.is_contiguous() &&
                        key_bound >= 0);
  const int64_t n = keys.numel();
  check_cub_items(n, "build_hash_array");
  const auto options = keys.options();
  const at::Device device = keys.device();
  HashArray h;
  h.sorted_keys = at::empty({n}, options);
  h.perm = at::empty({n}, options.dtype(at::kInt));
  h.unique_keys = at::empty({n}, options);
  // The scan below runs over all n entries, past the runs too; zeros there keep it in range.
  h.counts = at::zeros({n}, options.dtype(at::kInt));
  h.starts = at::empty({n}, options.dtype(at::kInt));
  h.num_unique = at::zeros({1}, options);
  if (n == 0) return h;

  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int items = static_cast<int>(n);
  const at::Tensor index = at::arange(n, options.dtype(at::kInt));
  // Keys are non-negative, so their unsigned order is their order, and only the bits that
  // key_bound needs take part in the sort (a 24-bit KITTI grid sorts in 3 passes, not 8).
  int end_bit = 1;
  while (end_bit < 63 && (key_bound >> end_bit) != 0) ++end_bit;
  const auto* keys_in = reinterpret_cast<const uint64_t*>(keys.data_ptr<int64_t>());
  auto* keys_out = reinterpret_cast<uint64_t*>(h.sorted_keys.data_ptr<int64_t>());
  const int32_t* index_in = index.data_ptr<int32_t>();
  int32_t* perm = h.perm.data_ptr<int32_t>();
  cub_call(device, [&](void* temp, size_t& bytes) {
    // LSD radix sort is stable: equal keys keep their index order.
    return cub::DeviceRadixSort::SortPairs(temp, bytes, keys_in, keys_out, index_in, perm, items, 0, end_bit, stream);
  });

  const int64_t* sorted = h.sorted_keys.data_ptr<int64_t>();
  int64_t* unique = h.unique_keys.data_ptr<int64_t>();
  int32_t* counts = h.counts.data_ptr<int32_t>();
  int64_t* num_runs = h.num_unique.data_ptr<int64_t>();
  cub_call(device, [&](void* temp, size_t& bytes) {
    return cub::DeviceRunLengthEncode::Encode(temp, bytes, sorted, unique, counts, num_runs, items, stream);
  });
  exclusive_sum(counts, h.starts.data_ptr<int32_t>(), n, device);
  drop_invalid_run_kernel<int64_t><<<1, 1, 0, stream>>>(unique, num_runs, key_bound);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return h;
}

}  // namespace cuda
}  // namespace pointops
