// cloud_tool: a point cloud file in, what pointops finds in it out, through the C++ API alone.
//
//   cloud_tool FILE [--device cpu|cuda] [--voxel 0.2] [--neighbors 16] [--samples 1024] [--planes 6]
//                   [--preset outdoor] [--presets planes.yaml] [--save results.pt]
//
// FILE is a PLY (ascii or binary little endian; the vertex element's x, y, z) or a KITTI velodyne
// .bin (float32 x, y, z, intensity). The steps: voxel_downsample, knn + estimate_normals on the
// downsampled cloud, farthest point sampling, detect_planes with a preset of configs/planes.yaml
// (the installed copy by default). --save writes every result with torch::pickle_save, which
// Python reads with torch.load (export_models.py --check-cloud compares it with the Python API).
#include <pointops/pointops.h>
#include <torch/cuda.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef POINTOPS_CONFIG_DIR
#define POINTOPS_CONFIG_DIR ""
#endif

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// KITTI velodyne scans: float32 (x, y, z, intensity) records.
at::Tensor read_kitti_bin(const std::string& path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) throw std::runtime_error("cannot read " + path);
  const std::streamsize bytes = file.tellg();
  if (bytes % 16 != 0)
    throw std::runtime_error(path + ": a KITTI .bin holds 16-byte records, got " + std::to_string(bytes) + " bytes");
  at::Tensor records = torch::empty({bytes / 16, 4}, torch::kFloat32);
  file.seekg(0);
  file.read(reinterpret_cast<char*>(records.data_ptr<float>()), bytes);
  return records.slice(1, 0, 3).contiguous();
}

// The size in bytes and a reader of one PLY scalar type.
struct PlyType {
  int size;
  double (*read)(const char*);
};

template <class T>
double read_as_double(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return static_cast<double>(value);
}

PlyType ply_type(const std::string& name) {
  static const std::map<std::string, PlyType> types = {
      {"char", {1, read_as_double<int8_t>}},     {"int8", {1, read_as_double<int8_t>}},
      {"uchar", {1, read_as_double<uint8_t>}},   {"uint8", {1, read_as_double<uint8_t>}},
      {"short", {2, read_as_double<int16_t>}},   {"int16", {2, read_as_double<int16_t>}},
      {"ushort", {2, read_as_double<uint16_t>}}, {"uint16", {2, read_as_double<uint16_t>}},
      {"int", {4, read_as_double<int32_t>}},     {"int32", {4, read_as_double<int32_t>}},
      {"uint", {4, read_as_double<uint32_t>}},   {"uint32", {4, read_as_double<uint32_t>}},
      {"float", {4, read_as_double<float>}},     {"float32", {4, read_as_double<float>}},
      {"double", {8, read_as_double<double>}},   {"float64", {8, read_as_double<double>}}};
  auto it = types.find(name);
  if (it == types.end()) throw std::runtime_error("PLY: unknown property type " + name);
  return it->second;
}

// The x, y, z of a PLY file's vertex element (the first element; ascii or binary little endian).
at::Tensor read_ply(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("cannot read " + path);
  std::string line, format;
  int64_t count = -1;
  std::vector<std::pair<std::string, PlyType>> properties;
  bool in_vertex = false;
  std::getline(file, line);
  if (line.rfind("ply", 0) != 0) throw std::runtime_error(path + " is not a PLY file");
  while (std::getline(file, line)) {
    std::istringstream words(line);
    std::string word;
    words >> word;
    if (word == "format") {
      words >> format;
    } else if (word == "element") {
      std::string name;
      words >> name;
      if (count >= 0 && in_vertex) in_vertex = false;  // a later element: the vertices come first
      if (name == "vertex") {
        if (count >= 0) throw std::runtime_error(path + ": the vertex element must be the file's first");
        words >> count;
        in_vertex = true;
      } else if (count < 0) {
        throw std::runtime_error(path + ": the vertex element must be the file's first");
      }
    } else if (word == "property" && in_vertex) {
      std::string type, name;
      words >> type;
      if (type == "list") throw std::runtime_error(path + ": list properties in the vertex element");
      words >> name;
      properties.emplace_back(name, ply_type(type));
    } else if (word == "end_header") {
      break;
    }
  }
  int column[3] = {-1, -1, -1};
  for (size_t i = 0; i < properties.size(); ++i) {
    for (int axis = 0; axis < 3; ++axis) {
      if (properties[i].first == std::string(1, "xyz"[axis])) column[axis] = static_cast<int>(i);
    }
  }
  if (count < 0 || column[0] < 0 || column[1] < 0 || column[2] < 0) {
    throw std::runtime_error(path + ": no vertex element with x, y and z");
  }
  at::Tensor points = torch::empty({count, 3}, torch::kFloat32);
  float* out = points.data_ptr<float>();
  if (format == "ascii") {
    for (int64_t v = 0; v < count; ++v) {
      std::vector<double> row(properties.size());
      for (double& value : row) file >> value;
      for (int axis = 0; axis < 3; ++axis) out[3 * v + axis] = static_cast<float>(row[column[axis]]);
    }
  } else if (format == "binary_little_endian") {
    int record = 0;
    std::vector<int> offset;
    for (const auto& property : properties) {
      offset.push_back(record);
      record += property.second.size;
    }
    std::vector<char> bytes(static_cast<size_t>(record) * count);
    file.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    for (int64_t v = 0; v < count; ++v) {
      const char* p = bytes.data() + v * record;
      for (int axis = 0; axis < 3; ++axis) {
        const int c = column[axis];
        out[3 * v + axis] = static_cast<float>(properties[c].second.read(p + offset[c]));
      }
    }
  } else {
    throw std::runtime_error(path + ": PLY format " + format + " (ascii or binary_little_endian only)");
  }
  if (!file) throw std::runtime_error(path + ": the file ends before its " + std::to_string(count) + " vertices");
  return points;
}

// One preset of configs/planes.yaml: the lines "  key: value" under "name:".
std::map<std::string, double> read_preset(const std::string& path, const std::string& name) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error("cannot read the plane presets " + path + " (pass --presets FILE)");
  std::map<std::string, double> values;
  std::string line;
  bool inside = false;
  while (std::getline(file, line)) {
    line = line.substr(0, line.find('#'));
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const size_t colon = line.find(':');
    if (line[0] != ' ') {
      inside = line.substr(0, colon) == name;
    } else if (inside && colon != std::string::npos) {
      std::string key = line.substr(0, colon);
      key = key.substr(key.find_first_not_of(' '));
      values[key] = std::stod(line.substr(colon + 1));
    }
  }
  if (values.empty()) throw std::runtime_error("no preset " + name + " in " + path);
  return values;
}

double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

int main(int argc, char** argv) try {
  std::string file, device_name = "cpu", preset = "outdoor", save;
  std::string presets = std::string(POINTOPS_CONFIG_DIR) + "/planes.yaml";
  double voxel = 0.2;
  int64_t neighbors = 16, samples = 1024, planes = 6;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--device")
      device_name = value();
    else if (arg == "--voxel")
      voxel = std::stod(value());
    else if (arg == "--neighbors")
      neighbors = std::stoll(value());
    else if (arg == "--samples")
      samples = std::stoll(value());
    else if (arg == "--planes")
      planes = std::stoll(value());
    else if (arg == "--preset")
      preset = value();
    else if (arg == "--presets")
      presets = value();
    else if (arg == "--save")
      save = value();
    else if (!arg.empty() && arg[0] != '-' && file.empty())
      file = arg;
    else
      throw std::runtime_error("unknown argument " + arg);
  }
  if (file.empty()) {
    std::fprintf(stderr,
                 "usage: %s FILE.ply|FILE.bin [--device cpu|cuda] [--voxel M] [--neighbors K] "
                 "[--samples S] [--planes P] [--preset NAME] [--presets planes.yaml] [--save OUT.pt]\n",
                 argv[0]);
    return 2;
  }
  const torch::Device device(device_name == "cuda" ? torch::kCUDA : torch::kCPU);
  const auto config = read_preset(presets, preset);
  torch::NoGradGuard no_grad;

  at::Tensor raw = ends_with(file, ".bin") ? read_kitti_bin(file) : read_ply(file);
  at::Tensor points = raw.unsqueeze(0).to(device);  // one cloud: (1, N, 3)
  // The pipeline, run twice: the first call also pays for start-up (CUDA's context and kernel
  // loading, the allocator's first blocks), the second is what each further cloud costs.
  struct Steps {
    pointops::VoxelDownsampleResult down;
    pointops::EstimateNormalsResult normals;
    pointops::FpsResult picks;
    pointops::DetectPlanesResult found;
  };
  auto steps = [&]() {
    auto down = pointops::voxel_downsample(points, std::nullopt, std::nullopt, {voxel, voxel, voxel});
    auto near = pointops::knn(down.points, down.lengths, down.points, down.lengths, neighbors);
    auto normals = pointops::estimate_normals(down.points, down.lengths, near.indices, std::nullopt);
    auto picks = pointops::fps(down.points, down.lengths, std::nullopt, samples);
    auto found =
        pointops::detect_planes(down.points, down.lengths, planes, static_cast<int64_t>(config.at("n_phi")),
                                static_cast<int64_t>(config.at("n_theta")), config.at("rho_step"), config.at("rho_max"),
                                config.at("distance_threshold"), config.at("min_inliers"));
    if (device.is_cuda()) torch::cuda::synchronize();
    return Steps{down, normals, picks, found};
  };
  auto start = std::chrono::steady_clock::now();
  steps();
  const double first_ms = elapsed_ms(start);
  start = std::chrono::steady_clock::now();
  const Steps result = steps();
  const double ms = elapsed_ms(start);
  const auto& [down, normals, picks, found] = result;

  const int64_t kept = down.lengths[0].item<int64_t>();
  const at::Tensor curvature = normals.curvature[0].slice(0, 0, kept);
  const at::Tensor last = picks.distances[0].slice(0, std::min(samples, kept) - 1).slice(0, 0, 1);
  std::printf("%s: %lld points, %lld after a %.3g m voxel grid\n", file.c_str(), static_cast<long long>(raw.size(0)),
              static_cast<long long>(kept), voxel);
  std::printf("normals from %lld neighbours: median curvature %.4f\n", static_cast<long long>(neighbors),
              kept > 0 ? curvature.median().item<double>() : 0.0);
  std::printf("%lld farthest point samples: every point within %.3f m of one\n",
              static_cast<long long>(std::min(samples, kept)), kept > 0 ? std::sqrt(last.item<double>()) : 0.0);
  const at::Tensor plane_rows = found.planes[0].cpu(), labels = found.labels[0].cpu();
  std::printf("planes (preset %s): n . p = d\n", preset.c_str());
  for (int64_t p = 0; p < plane_rows.size(0); ++p) {
    const at::Tensor row = plane_rows[p];
    if (std::isnan(row[3].item<double>())) break;
    std::printf("  %lld: n = (%+.4f, %+.4f, %+.4f), d = %8.3f m, %lld points\n", static_cast<long long>(p),
                row[0].item<double>(), row[1].item<double>(), row[2].item<double>(), row[3].item<double>(),
                static_cast<long long>(labels.eq(p).sum().item<int64_t>()));
  }
  std::printf("%.1f ms on %s, the first call %.1f ms (file reading excluded)\n", ms, device_name.c_str(), first_ms);

  if (!save.empty()) {
    c10::Dict<std::string, at::Tensor> results;
    results.insert("points", down.points.cpu());
    results.insert("lengths", down.lengths.cpu());
    results.insert("normals", normals.normals.cpu());
    results.insert("curvature", normals.curvature.cpu());
    results.insert("samples", picks.indices.cpu());
    results.insert("sample_distances", picks.distances.cpu());
    results.insert("planes", found.planes.cpu());
    results.insert("plane_votes", found.votes.cpu());
    results.insert("labels", found.labels.cpu());
    const std::vector<char> bytes = torch::pickle_save(results);
    std::ofstream(save, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::printf("saved %s\n", save.c_str());
  }
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "cloud_tool: %s\n", error.what());
  return 1;
}
