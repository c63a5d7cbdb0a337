// The plane ops' cached tables (plane_tables.h).
#include "hough/plane_tables.h"

#include <ATen/ops/cos.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/stack.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "common/portable_math.h"

namespace pointops {
namespace hough_detail {

namespace {

constexpr double kPi = 3.14159265358979323846;  // Python's math.pi

std::string device_key(const at::Device& device) { return device.str(); }

// A float64 host tensor holding `values`.
at::Tensor host_doubles(std::vector<double> values, at::IntArrayRef shape) {
  return at::from_blob(values.data(), shape, at::TensorOptions().dtype(at::kDouble)).clone();
}

// (sin phi cos theta, sin phi sin theta, cos phi) as pointops.hough.planes._normals computes it.
at::Tensor normals_of(const at::Tensor& phi, const at::Tensor& theta) {
  return at::stack({at::sin(phi).mul(at::cos(theta)), at::sin(phi).mul(at::sin(theta)), at::cos(phi)}, -1);
}

at::Tensor build_cell_normals(bool ball, int64_t n_phi, int64_t n_theta) {
  at::Tensor table;
  if (!ball) {
    // plane_grid_normals: phi and theta bin centres, broadcast over the grid before the sines
    std::vector<double> phi(n_phi), theta(n_theta);
    for (int64_t i = 0; i < n_phi; ++i) phi[i] = multiply(static_cast<double>(i) + 0.5, kPi / n_phi);
    for (int64_t j = 0; j < n_theta; ++j) theta[j] = multiply(static_cast<double>(j) + 0.5, kPi / n_theta);
    const at::Tensor phis = host_doubles(std::move(phi), {n_phi}).unsqueeze(1).expand({n_phi, n_theta});
    const at::Tensor thetas = host_doubles(std::move(theta), {n_theta}).unsqueeze(0).expand({n_phi, n_theta});
    table = normals_of(phis, thetas).reshape({-1, 3});
  } else {
    // ball_cells: ring i has max(1, floor(n_theta sin(phi_i) + 0.5)) cells
    std::vector<double> phi, theta;
    for (int64_t i = 0; i < n_phi; ++i) {
      const double centre = (static_cast<double>(i) + 0.5) * kPi / static_cast<double>(n_phi);
      const int64_t cells =
          std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(n_theta) * std::sin(centre) + 0.5)));
      for (int64_t j = 0; j < cells; ++j) {
        phi.push_back(multiply(static_cast<double>(i) + 0.5, kPi / n_phi));
        theta.push_back(divide(multiply(static_cast<double>(j) + 0.5, kPi), static_cast<double>(cells)));
      }
    }
    const int64_t m = static_cast<int64_t>(phi.size());
    table = normals_of(host_doubles(std::move(phi), {m}), host_doubles(std::move(theta), {m}));
  }
  return table.to(at::kFloat).contiguous();
}

at::Tensor build_rho_centres(int64_t n_rho, double rho_max) {
  at::Tensor table = at::empty({n_rho}, at::TensorOptions().dtype(at::kFloat));
  float* out = table.data_ptr<float>();
  const double step = 2.0 * rho_max / static_cast<double>(n_rho);
  for (int64_t r = 0; r < n_rho; ++r) {
    out[r] = static_cast<float>(subtract(multiply(static_cast<double>(r) + 0.5, step), rho_max));
  }
  return table;
}

std::string double_key(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%a", v);  // exact
  return buffer;
}

}  // namespace

at::Tensor cached_table(const std::string& key, const at::Device& device, bool capturing,
                        const std::function<at::Tensor()>& build) {
  static std::mutex mutex;
  // Never destroyed: freeing device tensors from a static destructor at exit, after CUDA is torn
  // down, aborts the process.
  static auto& tables = *new std::map<std::pair<std::string, std::string>, at::Tensor>;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto here = std::make_pair(key, device_key(device));
  const auto found = tables.find(here);
  if (found != tables.end()) return found->second;
  TORCH_CHECK(!capturing, "the plane tables for ", key, " are made on the first call with these arguments on ", device,
              ", and a CUDA graph capture cannot make them: call the op once before capturing");
  const auto host_key = std::make_pair(key, device_key(at::Device(at::kCPU)));
  auto host = tables.find(host_key);
  if (host == tables.end()) host = tables.emplace(host_key, build()).first;
  if (device.is_cpu()) return host->second;
  // Copied on a stream of its own and waited for, once: the table is then ready for every stream
  // (a copy on the caller's stream would race with a call on another), and the wait does not
  // include the caller's queued work.
  const c10::impl::VirtualGuardImpl guard_impl(device.type());
  const c10::StreamGuard on_side_stream(guard_impl.getStreamFromGlobalPool(device, /*isHighPriority=*/false));
  at::Tensor copy = host->second.to(device);
  tables.emplace(here, copy);
  return copy;
}

at::Tensor plane_cell_normals(bool ball, int64_t n_phi, int64_t n_theta, const at::Device& device, bool capturing) {
  const std::string key =
      std::string(ball ? "ball" : "grid") + " normals " + std::to_string(n_phi) + " x " + std::to_string(n_theta);
  return cached_table(key, device, capturing, [&] { return build_cell_normals(ball, n_phi, n_theta); });
}

at::Tensor plane_rho_centres(int64_t n_rho, double rho_max, const at::Device& device, bool capturing) {
  const std::string key = "rho centres " + std::to_string(n_rho) + " over " + double_key(rho_max);
  return cached_table(key, device, capturing, [&] { return build_rho_centres(n_rho, rho_max); });
}

}  // namespace hough_detail
}  // namespace pointops
