// Calls every function of pointops' C++ API with the registration samples' arguments
// (tests/samples_*.py, written by tests/cpp/write_api_cases.py) and checks each output equals, bit
// for bit, what torch.ops.pointops gave in Python for the same arguments; then that bad input
// throws c10::Error naming the argument. tools/check_deploy.sh builds and runs it.
//
//   test_api CASES.pt
#include "api_calls.h"

#include <torch/serialize.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

namespace {

// Equal values and dtypes, NaN where the other has NaN.
bool same(const at::Tensor& got, const at::Tensor& want) {
  if (got.sizes() != want.sizes() || got.scalar_type() != want.scalar_type()) return false;
  at::Tensor a = got.cpu();
  if (!at::isFloatingType(a.scalar_type())) return a.equal(want);
  return (a.eq(want) | (a.isnan() & want.isnan())).all().item<bool>();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CASES.pt (from tests/cpp/write_api_cases.py)\n", argv[0]);
    return 2;
  }
  std::ifstream file(argv[1], std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto cases = torch::pickle_load(bytes).toList();
  auto calls = api_calls::table();
  int passed = 0, failed = 0;
  std::set<std::string> covered;
  for (const c10::IValue& item : cases) {
    const auto entry = item.toTupleRef().elements();  // (op name, device, arguments, outputs)
    const std::string op = entry[0].toStringRef();
    const std::string device = entry[1].toStringRef();
    std::vector<c10::IValue> args;
    for (const c10::IValue& arg : entry[2].toListRef()) {
      args.push_back(arg.isTensor() ? c10::IValue(arg.toTensor().to(c10::Device(device))) : arg);
    }
    const auto want = entry[3].toListRef();
    std::string problem;
    try {
      const std::vector<at::Tensor> got = calls.at(op)(args);
      if (got.size() != want.size()) problem = "returned " + std::to_string(got.size()) + " outputs";
      for (size_t i = 0; i < got.size() && problem.empty(); ++i) {
        if (!same(got[i], want[i].toTensor())) problem = "output " + std::to_string(i) + " differs from Python's";
      }
    } catch (const std::exception& error) {
      const std::string what = error.what();
      problem = "threw: " + what.substr(0, what.find('\n'));
    }
    if (problem.empty()) {
      ++passed;
      covered.insert(op);
    } else {
      ++failed;
      std::printf("FAILED %s on %s: %s\n", op.c_str(), device.c_str(), problem.substr(0, 400).c_str());
    }
  }
  for (const auto& [op, call] : calls) {
    if (!covered.count(op)) {
      ++failed;
      std::printf("FAILED %s: no sample ran through the C++ API\n", op.c_str());
    }
  }
  // A clear error through the API, as from Python: the argument is named.
  try {
    pointops::fps(at::zeros({2, 5}), std::nullopt, std::nullopt, 2);
    ++failed;
    std::printf("FAILED fps of a 2-d tensor did not throw\n");
  } catch (const c10::Error& error) {
    const bool named = std::string(error.what_without_backtrace()).find("points") != std::string::npos;
    named ? ++passed : ++failed;
    if (!named) std::printf("FAILED the error does not name points: %s\n", error.what_without_backtrace());
  }
  std::printf("C++ API: %d checks passed, %d failed, %zu of %zu functions called\n", passed, failed, covered.size(),
              calls.size());
  return failed == 0 ? 0 : 1;
}
