// Hough peaks on CUDA (rules in peaks.h): the mark pass is one thread per bin running the same
// peak_key() as the CPU; top-k and decoding are the shared device-agnostic code in peaks_cpu.cpp.
//
// What bounds it: most bins are not candidates (zero or below min_votes) and return after one
// load; a candidate reads its (2r+1)^ndim neighbours through L1/L2 and stops at the first that
// beats it. The mark pass is roughly one read of the accumulator and one 8-byte write per bin;
// at::topk's radix select over the keys then costs a few more passes over them.
#include "hough/peaks.h"

#include <ATen/cuda/CUDAContext.h>
#include <torch/library.h>

#include "common/checks.h"
#include "common/cuda_utils.cuh"

namespace pointops {
namespace {

constexpr int kMarkThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kMarkThreads)
    mark_peaks_kernel(const T* __restrict__ acc, int64_t total, int64_t bins,
                      hough_detail::PeakGrid grid, int64_t* __restrict__ keys) {
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t b = i / bins;
    keys[i] = hough_detail::peak_key(acc + b * bins, i - b * bins, grid);
  }
}

std::tuple<at::Tensor, at::Tensor> hough_peaks_cuda(const at::Tensor& acc, at::IntArrayRef radius,
                                                    const c10::List<bool>& periodic, double min_votes,
                                                    int64_t k, bool plane_seam) {
  const hough_detail::PeakGrid grid =
      hough_detail::check_peaks_args(acc, radius, periodic, min_votes, k, plane_seam);
  const c10::cuda::CUDAGuard guard(acc.device());
  const at::Tensor a = acc.contiguous();
  const int64_t batch = a.size(0);
  const int64_t bins = batch == 0 ? 0 : a.numel() / batch;
  at::Tensor keys = at::empty({batch, bins}, a.options().dtype(at::kLong));
  const int64_t total = batch * bins;
  if (total > 0) {
    const int64_t blocks = std::min<int64_t>(cuda::ceil_div(total, kMarkThreads), 1 << 20);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    if (a.scalar_type() == at::kInt) {
      mark_peaks_kernel<int32_t><<<blocks, kMarkThreads, 0, stream>>>(
          a.data_ptr<int32_t>(), total, bins, grid, keys.data_ptr<int64_t>());
    } else {
      mark_peaks_kernel<float><<<blocks, kMarkThreads, 0, stream>>>(
          a.data_ptr<float>(), total, bins, grid, keys.data_ptr<int64_t>());
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return hough_detail::decode_peak_keys(keys, grid, k, a.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("hough_peaks", &hough_peaks_cuda); }

}  // namespace pointops
