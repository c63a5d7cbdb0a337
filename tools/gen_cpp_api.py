"""Writes pointops' C++ API from the one schema file: include/pointops/pointops.h (one typed function
per op, with the op's shape comment) and csrc/api.cpp (each function calls its op through the
dispatcher, so CPU and CUDA inputs reach the same kernels as torch.ops.pointops.* from Python),
and the table tests/cpp/api_calls.h through which tests/cpp/test_api.cpp calls every function
with the registration samples' arguments (tools/check_deploy.sh).

    python tools/gen_cpp_api.py            # rewrite both files
    python tools/gen_cpp_api.py --check    # exit 1 if either differs from what would be written

The schemas in csrc/pointops.cpp are the contract; tests/test_cpp_api.py checks that the committed
files are what this script writes, so a new or changed schema cannot leave the C++ API behind.
"""

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA_FILE = os.path.join(ROOT, "csrc", "pointops.cpp")
HEADER = os.path.join(ROOT, "include", "pointops", "pointops.h")
SOURCE = os.path.join(ROOT, "csrc", "api.cpp")
CALLS = os.path.join(ROOT, "tests", "cpp", "api_calls.h")

# schema type -> C++ expression of the API argument from IValue {} (tests/cpp/api_calls.h)
FROM_IVALUE = {
    "Tensor": "{}.toTensor()",
    "Optional[Tensor]": "{}.toOptional<at::Tensor>()",
    "int": "{}.toInt()",
    "Optional[int]": "{}.toOptional<int64_t>()",
    "float": "{}.toDouble()",
    "Optional[float]": "{}.toOptional<double>()",
    "bool": "{}.toBool()",
    "str": "{}.toStringRef()",
    "List[int]": "ints({})",
    "List[float]": "doubles({})",
    "Optional[List[float]]": "optional_doubles({})",
    "List[str]": "strings({})",
    "List[bool]": "bools({})",
}

# schema type -> (C++ parameter type, how the value becomes an IValue)
PARAMETER_TYPES = {
    "Tensor": ("const at::Tensor&", "{}"),
    "Optional[Tensor]": ("const std::optional<at::Tensor>&", "{}"),
    "int": ("int64_t", "{}"),
    "Optional[int]": ("std::optional<int64_t>", "{}"),
    "float": ("double", "{}"),
    "Optional[float]": ("std::optional<double>", "{}"),
    "bool": ("bool", "{}"),
    "str": ("const std::string&", "{}"),
    "List[int]": ("const std::vector<int64_t>&", "{}"),
    "List[float]": ("const std::vector<double>&", "{}"),
    "Optional[List[float]]": ("const std::optional<std::vector<double>>&", "{}"),
    "List[str]": ("const std::vector<std::string>&", "{}"),
    # std::vector<bool> has no IValue constructor: its elements are bits
    "List[bool]": ("const std::vector<bool>&", "bool_list({})"),
}


def parse_schemas(text):
    """[(schema, comment lines)] in file order: the `//` lines above each m.def (section rulers
    `// ----` and the lines between a ruler and the next def's comment are left out)."""
    import torch  # after --help: the parser answers at once

    out, comment = [], []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("// ----"):
            comment = []
        elif line.startswith("//"):
            comment.append(line[2:].rstrip())
        elif line.startswith("m.set_python_module"):
            continue
        elif line.startswith("m.def("):
            schema = re.match(r'm\.def\("(.*)"\);$', line).group(1).replace('\\"', '"')
            out.append((torch._C.parse_schema(schema), comment))
            comment = []
        elif line.startswith("TORCH_LIBRARY_IMPL"):
            break
        else:
            comment = []
    return out


def cpp_default(arg):
    value = arg.default_value
    kind = str(arg.type)
    if value is None:
        return "std::nullopt"
    if kind == "bool":
        return "true" if value else "false"
    if kind == "str":
        return '"' + value + '"'
    if kind == "float":
        return repr(float(value))
    if kind == "int":
        return str(int(value))
    if kind == "List[float]":
        return "std::vector<double>{" + ", ".join(repr(float(v)) for v in value) + "}"
    if kind == "List[int]":
        return "std::vector<int64_t>{" + ", ".join(str(int(v)) for v in value) + "}"
    raise ValueError(f"no C++ default for {arg.name}: {kind} = {value!r}")


def struct_name(op):
    return "".join(part.capitalize() for part in op.split("_")) + "Result"


def signature(schema, with_defaults):
    params = []
    for arg in schema.arguments:
        cpp_type = PARAMETER_TYPES[str(arg.type)][0]
        param = f"{cpp_type} {arg.name}"
        if with_defaults and arg.has_default_value():
            param += " = " + cpp_default(arg)
        params.append(param)
    result = "at::Tensor" if len(schema.returns) == 1 else struct_name(schema.name)
    return result, f"{schema.name}(" + ", ".join(params) + ")"


def wrap(text, indent, width=112):
    """Break a declaration after commas so that lines stay under width."""
    lines, line = [], ""
    for piece in re.split(r"(?<=, )", text):
        if line and len(line) + len(piece) > width:
            lines.append(line.rstrip())
            line = indent
        line += piece
    lines.append(line)
    return "\n".join(lines)


def header(schemas):
    out = [
        "// pointops' C++ API: one function per operator, with the names, arguments, defaults and shapes",
        "// of its schema (csrc/pointops.cpp). Each calls the registered op through the dispatcher, so CPU",
        "// and CUDA tensors reach the same kernels as torch.ops.pointops.* in Python, on the current CUDA",
        "// stream of the inputs' device. Link pointops::pointops (find_package(pointops)); docs/deploy.md.",
        "//",
        "// Conventions (docs/api.md): padded clouds (B, N, D) with an optional lengths (B,) int64 (pass",
        "// std::nullopt or {} for all N), or packed rows (P, D) with offsets (B+1,) int64; int64 indices and",
        "// counts, -1 where there is none; fixed-capacity outputs whose sizes come from the arguments. Bad",
        "// input throws c10::Error with a message that names the argument.",
        "//",
        "// Generated by tools/gen_cpp_api.py from csrc/pointops.cpp; edit the schema file, then rerun it.",
        "#pragma once",
        "",
        "#include <ATen/core/Tensor.h>",
        "",
        "#include <cstdint>",
        "#include <optional>",
        "#include <string>",
        "#include <vector>",
        "",
        "namespace pointops {",
        "",
    ]
    for schema, comment in schemas:
        if len(schema.returns) > 1:
            out.append(f"// The outputs of {schema.name}, in the schema's order.")
            out.append(f"struct {struct_name(schema.name)} {{")
            for ret in schema.returns:
                out.append(f"  at::Tensor {ret.name};")
            out.append("};")
            out.append("")
    for schema, comment in schemas:
        out.extend("//" + line for line in comment)
        result, call = signature(schema, with_defaults=True)
        out.append(wrap(f"{result} {call};", " " * (len(result) + len(schema.name) + 2)))
        out.append("")
    out.append("}  // namespace pointops")
    return "\n".join(out) + "\n"


def source(schemas):
    out = [
        "// The C++ API's definitions: each function boxes its arguments and calls its op through the",
        "// dispatcher (a few microseconds, against kernels of tens of microseconds and more).",
        "// Generated by tools/gen_cpp_api.py from csrc/pointops.cpp; edit the schema file, then rerun it.",
        '#include "pointops/pointops.h"',
        "",
        "#include <ATen/core/dispatch/Dispatcher.h>",
        "#include <ATen/core/stack.h>",
        "",
        "namespace pointops {",
        "namespace {",
        "",
        "c10::List<bool> bool_list(const std::vector<bool>& values) {",
        "  c10::List<bool> list;",
        "  list.reserve(values.size());",
        "  for (bool value : values) list.push_back(value);",
        "  return list;",
        "}",
        "",
        "// The op's handle, looked up once; throws if the library's registrations did not run.",
        "c10::OperatorHandle op(const char* name) {",
        '  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");',
        "}",
        "",
        "}  // namespace",
        "",
    ]
    for schema, _ in schemas:
        result, call = signature(schema, with_defaults=False)
        out.append(wrap(f"{result} {call} {{", " " * (len(result) + len(schema.name) + 2)))
        out.append(f'  static const c10::OperatorHandle handle = op("pointops::{schema.name}");')
        pushes = ", ".join(PARAMETER_TYPES[str(arg.type)][1].format(arg.name) for arg in schema.arguments)
        out.append(wrap(f"  torch::jit::Stack stack{{{pushes}}};", "      "))
        out.append("  handle.callBoxed(stack);")
        if len(schema.returns) == 1:
            out.append("  return stack[0].toTensor();")
        else:
            fields = ", ".join(f"stack[{i}].toTensor()" for i in range(len(schema.returns)))
            out.append(wrap(f"  return {{{fields}}};", "          "))
        out.append("}")
        out.append("")
    out.append("}  // namespace pointops")
    return "\n".join(out) + "\n"


def calls(schemas):
    out = [
        "// Every C++ API function, callable by op name with the arguments as IValues: tests/cpp/test_api.cpp",
        "// runs the registration samples (tests/samples_*.py) through it against Python's results.",
        "// Generated by tools/gen_cpp_api.py from csrc/pointops.cpp; edit the schema file, then rerun it.",
        "#pragma once",
        "",
        "#include <pointops/pointops.h>",
        "",
        "#include <ATen/core/ivalue.h>",
        "",
        "#include <functional>",
        "#include <map>",
        "#include <string>",
        "#include <vector>",
        "",
        "namespace api_calls {",
        "",
        "using Args = std::vector<c10::IValue>;",
        "using Call = std::function<std::vector<at::Tensor>(const Args&)>;",
        "",
        "// Lists read back by pickle_load are generic lists: element by element.",
        "inline std::vector<int64_t> ints(const c10::IValue& v) {",
        "  std::vector<int64_t> out;",
        "  for (const c10::IValue& x : v.toListRef()) out.push_back(x.toInt());",
        "  return out;",
        "}",
        "",
        "inline std::vector<double> doubles(const c10::IValue& v) {",
        "  std::vector<double> out;",
        "  for (const c10::IValue& x : v.toListRef()) out.push_back(x.toDouble());",
        "  return out;",
        "}",
        "",
        "inline std::optional<std::vector<double>> optional_doubles(const c10::IValue& v) {",
        "  if (v.isNone()) return std::nullopt;",
        "  return doubles(v);",
        "}",
        "",
        "inline std::vector<std::string> strings(const c10::IValue& v) {",
        "  std::vector<std::string> out;",
        "  for (const c10::IValue& s : v.toListRef()) out.push_back(s.toStringRef());",
        "  return out;",
        "}",
        "",
        "inline std::vector<bool> bools(const c10::IValue& v) {",
        "  std::vector<bool> out;",
        "  for (const c10::IValue& b : v.toListRef()) out.push_back(b.toBool());",
        "  return out;",
        "}",
        "",
        "// op name -> the API function called with all of the schema's arguments, outputs in schema order",
        "inline std::map<std::string, Call> table() {",
        "  std::map<std::string, Call> calls;",
    ]
    for schema, _ in schemas:
        args = ", ".join(FROM_IVALUE[str(arg.type)].format(f"a[{i}]") for i, arg in enumerate(schema.arguments))
        out.append(f'  calls["{schema.name}"] = [](const Args& a) {{')
        out.append(wrap(f"    auto r = pointops::{schema.name}({args});", "        "))
        if len(schema.returns) == 1:
            out.append("    return std::vector<at::Tensor>{r};")
        else:
            fields = ", ".join(f"r.{ret.name}" for ret in schema.returns)
            out.append(wrap(f"    return std::vector<at::Tensor>{{{fields}}};", "        "))
        out.append("  };")
    out += ["  return calls;", "}", "", "}  // namespace api_calls"]
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if a file differs from what would be written")
    args = parser.parse_args()
    with open(SCHEMA_FILE) as f:
        schemas = parse_schemas(f.read())
    stale = []
    for path, text in ((HEADER, header(schemas)), (SOURCE, source(schemas)), (CALLS, calls(schemas))):
        current = open(path).read() if os.path.exists(path) else None
        if current == text:
            continue
        if args.check:
            stale.append(os.path.relpath(path, ROOT))
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            print("wrote", os.path.relpath(path, ROOT))
    if stale:
        print("out of date with csrc/pointops.cpp (run python tools/gen_cpp_api.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
