// Argument checks shared by every operator. Each message names the argument, what was
// expected and what was observed, so a user error never reads like an internal assert.
#pragma once

#include "common/aten.h"

#include <cstdint>
#include <limits>
#include <optional>

namespace pointops {

inline void check_dim(const at::Tensor& t, const char* name, int64_t dim, const char* layout) {
  TORCH_CHECK(t.dim() == dim, name, " must have shape ", layout, " (", dim,
              " dimensions), got shape ", t.sizes());
}

inline void check_floating(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble ||
                  t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16,
              name, " must be float32, float64, float16 or bfloat16, got ", t.scalar_type());
}

inline void check_dtype(const at::Tensor& t, const char* name, at::ScalarType dtype) {
  TORCH_CHECK(t.scalar_type() == dtype, name, " must be ", dtype, ", got ", t.scalar_type());
}

inline void check_same_device(const at::Tensor& t, const char* name, const at::Tensor& ref,
                              const char* ref_name) {
  TORCH_CHECK(t.device() == ref.device(), name, " must be on the same device as ", ref_name,
              " (", ref.device(), "), got ", t.device());
}

inline void check_device_type(const at::Tensor& t, const char* name, at::DeviceType type) {
  TORCH_CHECK(t.device().type() == type, name, " must be a ", type, " tensor, got one on ",
              t.device());
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

// An optional per-cloud int64 vector such as lengths or start: shape (B,), on ref's device.
inline void check_optional_batch_vector(const std::optional<at::Tensor>& t, const char* name,
                                        int64_t batch, const at::Tensor& ref,
                                        const char* ref_name) {
  if (!t.has_value()) return;
  check_dtype(*t, name, at::kLong);
  check_shape(*t, name, {batch});
  check_same_device(*t, name, ref, ref_name);
}

// Padded clouds: points (B, N, C) floating with min_columns <= C <= max_columns (`layout` names
// the shape, e.g. "(B, N, C) with C >= 3"), and lengths (B,) int64 on the points' device, or none.
inline void check_padded_clouds(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                const char* layout, int64_t min_columns,
                                int64_t max_columns = std::numeric_limits<int64_t>::max()) {
  check_dim(points, "points", 3, layout);
  check_floating(points, "points");
  TORCH_CHECK(points.size(2) >= min_columns && points.size(2) <= max_columns,
              "points must have shape ", layout, ", got shape ", points.sizes());
  check_optional_batch_vector(lengths, "lengths", points.size(0), points, "points");
}

}  // namespace pointops
