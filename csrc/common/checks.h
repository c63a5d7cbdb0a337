// Argument checks shared by every operator. Each message names the argument, what was
// expected and what was observed, so a user error never reads like an internal assert.
#pragma once

#include "common/aten.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>

namespace pointops {

inline void check_dim(const at::Tensor& t, const char* name, int64_t dim, const char* layout) {
  TORCH_CHECK(t.dim() == dim, name, " must have shape ", layout, " (", dim, " dimensions), got shape ", t.sizes());
}

inline void check_floating(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble || t.scalar_type() == at::kHalf ||
                  t.scalar_type() == at::kBFloat16,
              name, " must be float32, float64, float16 or bfloat16, got ", t.scalar_type());
}

inline void check_dtype(const at::Tensor& t, const char* name, at::ScalarType dtype) {
  TORCH_CHECK(t.scalar_type() == dtype, name, " must be ", dtype, ", got ", t.scalar_type());
}

inline void check_same_device(const at::Tensor& t, const char* name, const at::Tensor& ref, const char* ref_name) {
  TORCH_CHECK(t.device() == ref.device(), name, " must be on the same device as ", ref_name, " (", ref.device(),
              "), got ", t.device());
}

inline void check_device_type(const at::Tensor& t, const char* name, at::DeviceType type) {
  TORCH_CHECK(t.device().type() == type, name, " must be a ", type, " tensor, got one on ", t.device());
}

inline void check_shape(const at::Tensor& t, const char* name, at::IntArrayRef expected) {
  TORCH_CHECK(t.sizes() == expected, name, " must have shape ", expected, ", got ", t.sizes());
}

inline void check_nonnegative(int64_t value, const char* name) {
  TORCH_CHECK(value >= 0, name, " must be >= 0, got ", value);
}

inline void check_fits_int32(int64_t value, const char* name) {
  TORCH_CHECK(value <= std::numeric_limits<int32_t>::max(), name, " must be at most ",
              std::numeric_limits<int32_t>::max(), ", got ", value);
}

// The memory an output on `device` can come from: the host's physical memory for the CPU, the
// GPU's total memory for CUDA (asked once per device, from the caching allocator, which the CUDA
// build registers; no stream is synchronized); 0 = unknown, no bound. Python's twin:
// pointops._checks.memory_bytes.
inline uint64_t memory_bytes(const at::Device& device) {
  if (device.is_cpu()) {
    static const uint64_t host = [] {
      const long pages = sysconf(_SC_PHYS_PAGES);
      const long page = sysconf(_SC_PAGE_SIZE);
      return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : uint64_t{0};
    }();
    return host;
  }
  if (device.is_cuda()) {
    static std::array<std::atomic<uint64_t>, 64> totals{};
    const int index = device.has_index() ? device.index() : 0;
    if (index < 0 || index >= static_cast<int>(totals.size())) return 0;
    uint64_t total = totals[index].load();
    if (total == 0) {
      try {
        c10::DeviceAllocator* allocator = c10::getDeviceAllocator(c10::DeviceType::CUDA);
        total = static_cast<uint64_t>(allocator->getMemoryInfo(static_cast<c10::DeviceIndex>(index)).second);
      } catch (const c10::Error&) {
        total = 0;  // an allocator that cannot tell: no bound
      }
      totals[index].store(total);
    }
    return total;
  }
  return 0;
}

// Refuses an output whose size, implied by the argument that `what` names ("k = 1000000"), is
// more than its device's memory: the caller then reads which argument is too large and what it
// implies, not the allocator's byte count. The shape's product is taken in double, so sizes past
// 2^63 elements are refused too.
inline void check_output_fits(const at::Device& device, const std::string& what, std::initializer_list<int64_t> shape,
                              int64_t element_size) {
  const uint64_t cap = memory_bytes(device);
  if (cap == 0) return;
  double elements = 1.0;
  for (int64_t s : shape) elements *= static_cast<double>(s);
  const double bytes = elements * static_cast<double>(element_size);
  if (bytes <= static_cast<double>(cap)) return;
  std::string dims = "[";
  for (int64_t s : shape) dims += (dims.size() > 1 ? ", " : "") + std::to_string(s);
  dims += "]";
  TORCH_CHECK(false, what, " implies an output of shape ", dims, " (", elements, " elements, ", bytes / 1073741824.0,
              " GiB), more than the ", device.type() == at::kCUDA ? "cuda" : "cpu", " memory (",
              static_cast<double>(cap) / 1073741824.0, " GiB)");
}

// An optional per-cloud int64 vector such as lengths or start: shape (B,), on ref's device.
inline void check_optional_batch_vector(const std::optional<at::Tensor>& t, const char* name, int64_t batch,
                                        const at::Tensor& ref, const char* ref_name) {
  if (!t.has_value()) return;
  check_dtype(*t, name, at::kLong);
  check_shape(*t, name, {batch});
  check_same_device(*t, name, ref, ref_name);
}

// Padded clouds: points (B, N, C) floating with min_columns <= C <= max_columns (`layout` names
// the shape, e.g. "(B, N, C) with C >= 3"), and lengths (B,) int64 on the points' device, or none.
inline void check_padded_clouds(const at::Tensor& points, const std::optional<at::Tensor>& lengths, const char* layout,
                                int64_t min_columns, int64_t max_columns = std::numeric_limits<int64_t>::max()) {
  check_dim(points, "points", 3, layout);
  check_floating(points, "points");
  TORCH_CHECK(points.size(2) >= min_columns && points.size(2) <= max_columns, "points must have shape ", layout,
              ", got shape ", points.sizes());
  check_optional_batch_vector(lengths, "lengths", points.size(0), points, "points");
}

}  // namespace pointops
