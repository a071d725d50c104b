// Manifest reading and validation: every bad-manifest case reports its field path, and all
// problems come out in one pass.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "cadre/launch/job_spec.h"
#include "cadre/launch/manifest.h"

namespace cadre::launch {
namespace {

const Installed kTorch113{"1.13.0a0", "/usr/bin/python3"};

struct Checked {
  std::optional<JobSpec> spec;
  Problems problems;

  // True when some problem is at `path` and its message contains `text`.
  bool Has(const std::string& path, const std::string& text) const {
    for (const auto& p : problems.list()) {
      if (p.path == path && p.message.find(text) != std::string::npos) return true;
    }
    return false;
  }
};

Checked Check(const std::string& yaml, const Installed& installed = kTorch113) {
  Checked c;
  JobRequest request;
  request.base_dir = "/tmp";
  if (ReadManifest(yaml, "job.yaml", &request, &c.problems)) {
    c.spec = BuildJobSpec(request, installed, &c.problems);
  }
  return c;
}

constexpr const char* kWml = R"(
name: fashion
framework: {name: pytorch-horovod, version: "1.13"}
execution:
  command: python3 train.py --epochs 1
  compute_configuration: {name: k80x2, nodes: 2}
training_data_reference: {type: fs, location: {path: /usr}}
training_results_reference: {type: fs, location: {path: out}}
)";

TEST(Manifest, WmlShapeResolvesEveryField) {
  Checked c = Check(kWml);
  ASSERT_TRUE(c.spec) << c.problems.ToString();
  EXPECT_EQ(c.spec->name, "fashion");
  EXPECT_EQ(c.spec->framework.mode, Mode::kHorovod);
  EXPECT_EQ(c.spec->command, "python3 train.py --epochs 1");
  EXPECT_EQ(c.spec->compute.name, "k80x2");
  EXPECT_EQ(c.spec->nodes, 2);
  EXPECT_EQ(c.spec->slots_per_learner, 2);
  EXPECT_EQ(c.spec->total_slots(), 4);
  EXPECT_EQ(c.spec->parameter_servers, 0);
  EXPECT_EQ(c.spec->data_dir, "/usr");
  EXPECT_EQ(c.spec->results_dir, "/tmp/out");  // relative to the manifest's folder
  EXPECT_EQ(c.spec->work_dir, "/tmp");
}

TEST(Manifest, BackendAndImageAreRead) {
  Checked c = Check(std::string(kWml) + "image: registry.example/cadre:1\n");
  ASSERT_TRUE(c.spec) << c.problems.ToString();
  EXPECT_EQ(c.spec->backend, "");
  EXPECT_EQ(c.spec->image, "registry.example/cadre:1");
  std::string with_backend = kWml;
  with_backend.replace(with_backend.find("execution:\n"), 11, "execution:\n  backend: slurm\n");
  c = Check(with_backend);
  ASSERT_TRUE(c.spec) << c.problems.ToString();
  EXPECT_EQ(c.spec->backend, "slurm");
}

TEST(Manifest, FfdlShape) {
  Checked c = Check(R"(
name: ffdl-job
version: "1.0"
description: a job in FfDL's shape
learners: 3
gpus: 2
cpus: 0.5
memory: 1Gb
framework:
  name: pytorch-ddl
  version: "1.13.1-py3"
  command: python3 train.py
data_stores:
  - id: local
    type: mount_volume
    training_data: {container: /usr}
    training_results: {container: /tmp/results}
)");
  ASSERT_TRUE(c.spec) << c.problems.ToString();
  EXPECT_EQ(c.spec->nodes, 3);
  EXPECT_EQ(c.spec->compute.gpus, 2);
  EXPECT_EQ(c.spec->slots_per_learner, 2);
  EXPECT_EQ(c.spec->framework.mode, Mode::kDdl);
  EXPECT_EQ(c.spec->command, "python3 train.py");
  EXPECT_EQ(c.spec->data_dir, "/usr");
  EXPECT_EQ(c.spec->results_dir, "/tmp/results");
}

TEST(Manifest, ParameterServerModeDefaultsToOneServerAndOneSlot) {
  Checked c = Check(R"(
framework: {name: tensorflow}
execution: {command: ./run.sh, compute_configuration: {name: k80x4, nodes: 3}}
)");
  ASSERT_TRUE(c.spec) << c.problems.ToString();
  EXPECT_EQ(c.spec->framework.mode, Mode::kParameterServer);
  EXPECT_EQ(c.spec->parameter_servers, 1);
  EXPECT_EQ(c.spec->slots_per_learner, 1);
  EXPECT_TRUE(c.spec->is_server(1));
  EXPECT_FALSE(c.spec->is_server(2));
}

TEST(Manifest, UnknownFrameworkListsValidOnes) {
  Checked c = Check(R"(
framework: {name: pytorch-horovd}
execution: {command: x, compute_configuration: {name: k80, nodes: 2}}
)");
  EXPECT_FALSE(c.spec);
  EXPECT_TRUE(c.Has("framework.name", "unknown framework 'pytorch-horovd'"));
  EXPECT_TRUE(c.Has("framework.name", "did you mean 'pytorch-horovod'"));
  EXPECT_TRUE(c.Has("framework.name", "valid: pytorch, pytorch-ddl, pytorch-horovod"));
}

TEST(Manifest, UnknownComputeConfigurationListsValidOnes) {
  Checked c = Check(R"(
framework: {name: pytorch-ddl}
execution: {command: x, compute_configuration: {name: k81x2, nodes: 2}}
)");
  EXPECT_TRUE(c.Has("execution.compute_configuration.name", "unknown compute configuration"));
  EXPECT_TRUE(c.Has("execution.compute_configuration.name", "did you mean 'k80x2'"));
  EXPECT_TRUE(c.Has("execution.compute_configuration.name", "v100x2"));
}

TEST(Manifest, VersionMustMatchInstalledTorch) {
  Checked c = Check(R"(
framework: {name: pytorch, version: "1.12"}
execution: {command: x}
)");
  EXPECT_TRUE(c.Has("framework.version", "'1.12' does not match the installed torch 1.13"));
  // No torch at all is its own message.
  Checked none = Check(R"(
framework: {name: pytorch, version: "1.13"}
execution: {command: x}
)",
                       Installed{std::nullopt, "/usr/bin/python3"});
  EXPECT_TRUE(none.Has("framework.version", "no python3 here can import torch"));
  // TensorFlow versions are not checked: the runner is framework-agnostic.
  EXPECT_TRUE(
      Check("framework: {name: tensorflow, version: '2.4'}\nexecution: {command: x}\n").spec);
}

TEST(Manifest, DistributedAllreduceNeedsTwoLearners) {
  Checked c = Check(R"(
framework: {name: pytorch-horovod}
execution: {command: x, compute_configuration: {name: k80x2, nodes: 1}}
)");
  EXPECT_TRUE(c.Has("execution.compute_configuration.nodes", "needs at least 2 learners, got 1"));
  EXPECT_TRUE(Check("framework: {name: pytorch}\nexecution: {command: x}\n").spec);
}

TEST(Manifest, MissingCommand) {
  Checked c = Check("framework: {name: pytorch}\n");
  EXPECT_TRUE(c.Has("execution.command", "missing"));
  Checked blank = Check("framework: {name: pytorch}\nexecution: {command: '  '}\n");
  EXPECT_TRUE(blank.Has("execution.command", "missing"));
}

TEST(Manifest, UnknownKeysSuggestTheClosest) {
  Checked c = Check(R"(
framework: {name: pytorch, verison: "1.13"}
execution: {command: x, compute_configuration: {name: cpu, nodse: 2}}
paramter_servers: 1
zzz: 1
)");
  EXPECT_TRUE(c.Has("framework.verison", "did you mean 'version'"));
  EXPECT_TRUE(c.Has("execution.compute_configuration.nodse", "did you mean 'nodes'"));
  EXPECT_TRUE(c.Has("paramter_servers", "did you mean 'parameter_servers'"));
  EXPECT_TRUE(c.Has("zzz", "unknown key (known here:"));
}

TEST(Manifest, WrongTypes) {
  Checked c = Check(R"(
name: [a, b]
framework: pytorch
execution:
  command: {run: x}
  compute_configuration: {name: cpu, nodes: two}
parameter_servers: "1"
)");
  EXPECT_TRUE(c.Has("name", "expected a string, got a list"));
  EXPECT_TRUE(c.Has("framework", "expected a mapping, got 'pytorch'"));
  EXPECT_TRUE(c.Has("execution.command", "expected a string, got a mapping"));
  EXPECT_TRUE(c.Has("execution.compute_configuration.nodes", "expected an integer, got 'two'"));
  EXPECT_TRUE(c.Has("parameter_servers",
                    "expected an integer, got the string '1' (quoted; an integer is written "
                    "without quotes)"))
      << c.problems.ToString();
}

// A value that cannot be read is one problem: the checks that depend on it do not go on with
// its default (a quoted "2" learners is not "needs at least 2 learners, got 1").
TEST(Manifest, AnUnreadableValueIsOneProblemNotFollowOns) {
  for (const char* nodes : {"\"3\"", "2.5", "100000000000000000000000", "[3]"}) {
    Checked c = Check(std::string(R"(
framework: {name: pytorch-horovod}
execution: {command: x, compute_configuration: {name: cpu, nodes: )") +
                      nodes + R"(}}
min_nodes: 2
max_restarts: "1"
)");
    EXPECT_EQ(c.problems.size(), 2u) << nodes;
    EXPECT_TRUE(c.Has("execution.compute_configuration.nodes", "")) << nodes;
    EXPECT_TRUE(c.Has("max_restarts", "expected an integer, got the string '1'")) << nodes;
  }
  Checked ps = Check(R"(
framework: {name: pytorch}
execution: {command: x, compute_configuration: {name: cpu, nodes: two}}
parameter_servers: 2
)");
  ASSERT_EQ(ps.problems.size(), 1u);
  EXPECT_TRUE(ps.Has("execution.compute_configuration.nodes", "expected an integer, got 'two'"));
  Checked elastic = Check(R"(
framework: {name: pytorch-horovod}
execution: {command: x, compute_configuration: {name: cpu, nodes: 3}}
max_restarts: 1
min_nodes: "2"
rejoin_after: 10
)");
  ASSERT_EQ(elastic.problems.size(), 1u);
  EXPECT_TRUE(elastic.Has("min_nodes", "expected an integer, got the string '2'"));
}

TEST(Manifest, ParameterServersMustLeaveAWorker) {
  Checked c = Check(R"(
framework: {name: pytorch}
execution: {command: x, compute_configuration: {name: cpu, nodes: 2}}
parameter_servers: 2
)");
  EXPECT_TRUE(c.Has("parameter_servers", "2 parameter servers need more than 2 learners"));
  Checked wrong_mode = Check(R"(
framework: {name: pytorch-horovod}
execution: {command: x, compute_configuration: {name: cpu, nodes: 2}}
parameter_servers: 1
)");
  EXPECT_TRUE(wrong_mode.Has("parameter_servers", "only for the parameter-server frameworks"));
}

TEST(Manifest, EveryProblemIsReportedAtOnce) {
  Checked c = Check(R"(
framework: {name: caffe, version: "0.1"}
execution: {compute_configuration: {name: tpu, nodes: 0}}
parameter_servers: 5
extra: 1
training_data_reference: {type: s3, location: {path: /nope/nowhere}}
)");
  EXPECT_FALSE(c.spec);
  EXPECT_TRUE(c.Has("framework.name", "unknown framework 'caffe'"));
  EXPECT_TRUE(c.Has("execution.compute_configuration.name", "unknown compute configuration"));
  EXPECT_TRUE(c.Has("execution.compute_configuration.nodes", "must be at least 1"));
  EXPECT_TRUE(c.Has("execution.command", "missing"));
  EXPECT_TRUE(c.Has("extra", "unknown key"));
  EXPECT_TRUE(c.Has("training_data_reference.type", "'s3' is not available"));
  EXPECT_TRUE(c.Has("training_data_reference.location.path", "is not a folder"));
  EXPECT_GE(c.problems.size(), 7u) << c.problems.ToString();
}

std::string WithResults(const std::string& path) {
  return "framework: {name: pytorch}\nexecution: {command: x}\n"
         "training_results_reference: {type: fs, location: {path: '" +
         path + "'}}\n";
}

TEST(Manifest, AResultsFolderThatIsAFileIsRefusedByItsField) {
  // It failed only while the job was set up: an I/O error naming neither field nor flag.
  const std::string file =
      (std::filesystem::path(testing::TempDir()) / "cadre_manifest_results_file").string();
  std::ofstream(file) << "x";
  for (const std::string& path : {file, file + "/below/it"}) {
    Checked c = Check(WithResults(path));
    EXPECT_FALSE(c.spec) << path;
    EXPECT_TRUE(c.Has("training_results_reference.location.path",
                      "'" + file + "' is not a folder; job directories are created under it"))
        << c.problems.ToString();
  }
  Checked missing = Check(WithResults(file + "_dir/new/runs"));
  EXPECT_TRUE(missing.spec) << missing.problems.ToString();  // created when the job starts
  std::filesystem::remove(file);
}

TEST(Manifest, MixedShapesAndSyntaxErrors) {
  Checked mixed = Check(R"(
learners: 2
framework: {name: pytorch, command: x}
execution: {command: y}
)");
  EXPECT_TRUE(mixed.Has("manifest", "mixes the FfDL shape (learners) with the WML shape"));

  Checked syntax = Check("framework: {name: pytorch\nexecution: [\n");
  ASSERT_EQ(syntax.problems.size(), 1u);
  EXPECT_NE(syntax.problems.list()[0].path.find("job.yaml:"), std::string::npos);
  EXPECT_NE(syntax.problems.list()[0].message.find("not valid YAML"), std::string::npos);

  // yaml-cpp stops deep nesting with the message "bad file".
  Checked deep = Check("a: " + std::string(5000, '[') + std::string(5000, ']') + "\n");
  ASSERT_EQ(deep.problems.size(), 1u);
  EXPECT_NE(deep.problems.list()[0].message.find("levels deep"), std::string::npos)
      << deep.problems.ToString();

  Checked scalar = Check("just a string\n");
  EXPECT_TRUE(scalar.Has("manifest", "expected a mapping"));
  Checked empty = Check("");
  EXPECT_TRUE(empty.Has("manifest", "is empty"));
}

TEST(Manifest, OnlyASmallRegularFileIsRead) {
  // A symlink to /dev/zero once read until memory ran out; a FIFO held the runner until someone
  // wrote to it.
  const std::filesystem::path dir =
      ::testing::TempDir() + "manifest-files-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::filesystem::create_symlink("/dev/zero", dir / "zero.yaml");
  ASSERT_EQ(mkfifo((dir / "fifo.yaml").c_str(), 0600), 0);
  std::ofstream(dir / "big.yaml") << "name: " << std::string(2 << 20, 'x') << "\n";
  std::filesystem::create_directory(dir / "folder.yaml");
  const std::pair<const char*, const char*> cases[] = {{"zero.yaml", "not a regular file"},
                                                       {"fifo.yaml", "not a regular file"},
                                                       {"big.yaml", "larger than 1 MiB"},
                                                       {"folder.yaml", "Is a directory"},
                                                       {"missing.yaml", "No such file"}};
  for (const auto& [name, words] : cases) {
    JobRequest request;
    Problems problems;
    EXPECT_FALSE(LoadManifestFile(dir / name, &request, &problems)) << name;
    ASSERT_EQ(problems.size(), 1u) << name;
    EXPECT_EQ(problems.list()[0].path, "manifest");
    EXPECT_NE(problems.list()[0].message.find(words), std::string::npos)
        << name << ": " << problems.ToString();
  }
  std::filesystem::remove_all(dir);
}

TEST(Manifest, FlagsOverrideAndNameTheirOrigin) {
  JobRequest request;
  Problems problems;
  ASSERT_TRUE(ReadManifest(kWml, "job.yaml", &request, &problems));
  request.nodes.Set(1, "--nodes");
  auto spec = BuildJobSpec(request, kTorch113, &problems);
  EXPECT_FALSE(spec);
  ASSERT_EQ(problems.size(), 1u) << problems.ToString();
  EXPECT_EQ(problems.list()[0].path, "--nodes");
}

TEST(Manifest, ASectionThatIsNotAMappingIsOneProblem) {
  Checked framework = Check("framework: pytorch\nexecution: {command: x}\n");
  ASSERT_EQ(framework.problems.size(), 1u) << framework.problems.ToString();
  EXPECT_TRUE(framework.Has("framework", "expected a mapping, got 'pytorch'"));
  Checked name = Check("framework: {name: [pytorch]}\nexecution: {command: x}\n");
  ASSERT_EQ(name.problems.size(), 1u) << name.problems.ToString();
  EXPECT_TRUE(name.Has("framework.name", "expected a string"));
  Checked execution = Check("framework: {name: pytorch}\nexecution: python3 train.py\n");
  ASSERT_EQ(execution.problems.size(), 1u) << execution.problems.ToString();
  EXPECT_TRUE(execution.Has("execution", "expected a mapping"));
  // Still reported when it is simply absent.
  EXPECT_TRUE(Check("execution: {command: x}\n").Has("framework.name", "missing"));
}

TEST(Manifest, TheNameIsOnePrintableLineOfAtMost256Bytes) {
  const std::string body = "framework: {name: pytorch}\nexecution: {command: x}\n";
  EXPECT_TRUE(Check("name: " + std::string(256, 'a') + "\n" + body).spec);
  Checked too_long = Check("name: " + std::string(257, 'a') + "\n" + body);
  EXPECT_FALSE(too_long.spec);
  EXPECT_TRUE(too_long.Has("name", "is 257 bytes; at most 256"));
  Checked two_lines = Check("name: \"first\\nsecond\"\n" + body);
  EXPECT_FALSE(two_lines.spec);
  EXPECT_TRUE(two_lines.Has("name", "control character"));
  Checked escape = Check("name: \"a\\x1b[2Jb\"\n" + body);
  EXPECT_TRUE(escape.Has("name", "control character"));
  // Any UTF-8 text is a name.
  EXPECT_TRUE(Check("name: \"r\u00e9seau-\u65e5\u672c\"\n" + body).spec);
}

// A problem is one line of text a terminal shows as it is: what a manifest holds (binary junk,
// escape sequences, bytes that are not UTF-8) appears escaped and cut, wherever it is echoed.
bool Printable(const Problems& problems) {
  for (const auto& p : problems.list()) {
    for (unsigned char c : p.ToString()) {
      if (c < 0x20 || c >= 0x7f) return false;
    }
  }
  return true;
}

TEST(Manifest, BytesOfABinaryManifestAreEscapedInEveryProblem) {
  // yaml-cpp's message holds the byte it stopped at: "unknown escape character: <0xc9>".
  Checked escape = Check("name: \"a\\\xc9\"\n");
  ASSERT_EQ(escape.problems.size(), 1u) << escape.problems.ToString();
  EXPECT_NE(escape.problems.list()[0].message.find("unknown escape character: \\xc9"),
            std::string::npos)
      << escape.problems.ToString();
  EXPECT_TRUE(Printable(escape.problems)) << escape.problems.ToString();

  // A file that reads as one scalar: shown escaped and cut, not as 300 raw bytes.
  std::string junk(300, '\0');
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>("\x01\xff\x1b\x9bz"[i % 5]);
  Checked scalar = Check(junk);
  EXPECT_TRUE(scalar.Has("manifest", "expected a mapping, got '\\x01\\xff\\x1b\\x9bz"))
      << scalar.problems.ToString();
  EXPECT_TRUE(scalar.Has("manifest", "... ("));
  EXPECT_TRUE(Printable(scalar.problems)) << scalar.problems.ToString();

  // Keys, values and their echoes in later checks.
  Checked fields = Check(
      "\"k\\e[2J\": 1\n"
      "framework: {name: \"pytorch\\e[31m\", version: \"1.\\x07\"}\n"
      "execution: {command: x, compute_configuration: {name: \"k80\\x0a\", nodes: \"\\x9b\"}}\n"
      "max_restarts: 99999999999999999999\\x01\n"
      "training_data_reference: {type: \"\\x1b\", location: {path: \"/no\\x1b\"}}\n");
  EXPECT_TRUE(fields.Has("k\\x1b[2J", "unknown key")) << fields.problems.ToString();
  EXPECT_TRUE(fields.Has("framework.name", "unknown framework 'pytorch\\x1b[31m'"));
  EXPECT_TRUE(fields.Has("execution.compute_configuration.name", "'k80\\x0a'"));
  EXPECT_TRUE(fields.Has("execution.compute_configuration.nodes", "got the string '\\xc2\\x9b'"));
  EXPECT_TRUE(fields.Has("training_data_reference.type", "'\\x1b' is not available"));
  EXPECT_TRUE(Printable(fields.problems)) << fields.problems.ToString();

  // A value past the bound is cut: a 512 KiB framework name is not a 512 KiB message.
  Checked huge =
      Check("framework: {name: " + std::string(1 << 19, 'x') + "}\nexecution: {command: x}\n");
  ASSERT_EQ(huge.problems.size(), 1u);
  EXPECT_LT(huge.problems.list()[0].message.size(), 400u);
  EXPECT_TRUE(huge.Has("framework.name", "(524288 bytes)"));
}

TEST(Manifest, TextOverOneMibIsRefusedAsItsFileWouldBe) {
  // The service hands a manifest's text to ReadManifest, then writes it for a runner that
  // reads at most 1 MiB: accepted, the job failed at once.
  Checked huge = Check("framework: {name: pytorch}\nexecution: {command: echo " +
                       std::string(1 << 20, 'x') + "}\n");
  ASSERT_EQ(huge.problems.size(), 1u) << huge.problems.ToString();
  EXPECT_NE(huge.problems.list()[0].message.find("larger than 1 MiB"), std::string::npos)
      << huge.problems.ToString();
}

TEST(Manifest, TextThatIsNotUtf8IsAProblemOfItsField) {
  // It once reached status.json, whose JSON writer threw: the runner stopped mid-set-up.
  Checked name = Check("name: caf\xe9\nframework: {name: pytorch}\nexecution: {command: x}\n");
  EXPECT_TRUE(name.Has("name", "not UTF-8 text: 'caf\\xe9'")) << name.problems.ToString();
  Checked command = Check("framework: {name: pytorch}\nexecution: {command: \"echo \xff\"}\n");
  EXPECT_TRUE(command.Has("execution.command", "not UTF-8 text"));
  ASSERT_EQ(command.problems.size(), 1u) << command.problems.ToString();  // not also "missing"

  // --name is checked the same way.
  JobRequest request;
  Problems problems;
  ASSERT_TRUE(ReadManifest(kWml, "job.yaml", &request, &problems));
  request.name.Set("a\xff", "--name");
  EXPECT_FALSE(BuildJobSpec(request, kTorch113, &problems));
  ASSERT_EQ(problems.size(), 1u) << problems.ToString();
  EXPECT_EQ(problems.list()[0].path, "--name");
  EXPECT_NE(problems.list()[0].message.find("UTF-8"), std::string::npos);
}

TEST(Manifest, AKeyGivenTwiceIsAProblem) {
  // yaml-cpp keeps one of them silently: the job would run with a value nobody chose.
  Checked c = Check(
      "name: a\nname: b\nframework: {name: pytorch, name: pytorch-horovod}\n"
      "execution: {command: x}\n");
  EXPECT_TRUE(c.Has("name", "given twice")) << c.problems.ToString();
  EXPECT_TRUE(c.Has("framework.name", "given twice"));
}

TEST(Manifest, NumbersOutOfRangeNameTheirField) {
  // 2^32 + 1 GPUs once narrowed to 1 and was accepted as a k80 job.
  Checked gpus = Check(R"(
learners: 2
gpus: 4294967297
cpus: -1
framework: {name: pytorch-horovod, command: x}
)");
  EXPECT_FALSE(gpus.spec);
  EXPECT_TRUE(gpus.Has("gpus", "4294967297 GPUs per learner is not offered"));
  EXPECT_TRUE(gpus.Has("cpus", "must be a number above 0"));
  Checked negative = Check("learners: 2\ngpus: -1\nframework: {name: pytorch, command: x}\n");
  EXPECT_TRUE(negative.Has("gpus", "-1 GPUs per learner is not offered"));
  Checked huge = Check(R"(
learners: 99999999999999999999
framework: {name: pytorch, command: x}
)");
  EXPECT_TRUE(huge.Has("learners", "out of range"));
}

TEST(Manifest, RestartsAndMinNodes) {
  Checked ok = Check(R"(
framework: {name: pytorch-horovod}
execution: {command: x, compute_configuration: {name: cpu, nodes: 3}}
max_restarts: 2
min_nodes: 2
)");
  ASSERT_TRUE(ok.spec) << ok.problems.ToString();
  EXPECT_EQ(ok.spec->max_restarts, 2);
  EXPECT_EQ(ok.spec->min_nodes, 2);
  EXPECT_TRUE(ok.spec->elastic());

  Checked plain = Check(kWml);
  ASSERT_TRUE(plain.spec);
  EXPECT_EQ(plain.spec->max_restarts, 0);
  EXPECT_EQ(plain.spec->min_nodes, 2);
  EXPECT_FALSE(plain.spec->elastic());

  Checked bad = Check(R"(
framework: {name: pytorch-horovod}
execution: {command: x, compute_configuration: {name: cpu, nodes: 3}}
max_restarts: -1
min_nodes: 4
)");
  EXPECT_TRUE(bad.Has("max_restarts", "must be 0..1000, got -1"));
  EXPECT_TRUE(bad.Has("min_nodes", "must be 1..3"));

  Checked ps = Check(R"(
framework: {name: pytorch}
execution: {command: x, compute_configuration: {name: cpu, nodes: 3}}
max_restarts: 1
min_nodes: 2
)");
  EXPECT_TRUE(ps.Has("min_nodes", "needs a Horovod framework"));

  Checked no_restarts = Check(R"(
framework: {name: pytorch-horovod}
execution: {command: x, compute_configuration: {name: cpu, nodes: 3}}
min_nodes: 2
)");
  EXPECT_TRUE(no_restarts.Has("min_nodes", "set max_restarts"));

  Checked too_few = Check(R"(
framework: {name: pytorch-horovod}
execution: {command: x, compute_configuration: {name: cpu, nodes: 3}}
max_restarts: 1
min_nodes: 1
)");
  EXPECT_TRUE(too_few.Has("min_nodes", "needs at least 2 learners"));

  Checked typed = Check(R"(
framework: {name: pytorch, command: x}
learners: 2
max_restarts: "2"
)");
  EXPECT_TRUE(typed.Has("max_restarts", "expected an integer"));
}

TEST(Manifest, RejoinAfter) {
  Checked defaulted = Check(R"(
framework: {name: pytorch-horovod}
execution: {command: x, compute_configuration: {name: cpu, nodes: 3}}
max_restarts: 1
min_nodes: 2
)");
  ASSERT_TRUE(defaulted.spec) << defaulted.problems.ToString();
  EXPECT_EQ(defaulted.spec->rejoin_after_s, kDefaultRejoinAfterS);

  Checked never = Check(R"(
framework: {name: pytorch-horovod}
execution: {command: x, compute_configuration: {name: cpu, nodes: 3}}
max_restarts: 1
min_nodes: 2
rejoin_after: -1
)");
  ASSERT_TRUE(never.spec) << never.problems.ToString();
  EXPECT_EQ(never.spec->rejoin_after_s, -1);

  Checked bad = Check(R"(
framework: {name: pytorch-horovod}
execution: {command: x, compute_configuration: {name: cpu, nodes: 3}}
max_restarts: 1
min_nodes: 2
rejoin_after: -2
)");
  EXPECT_TRUE(bad.Has("rejoin_after", "must be -1 (never) or 0..604800 seconds, got -2"));

  Checked not_elastic = Check(R"(
framework: {name: pytorch-horovod}
execution: {command: x, compute_configuration: {name: cpu, nodes: 3}}
max_restarts: 1
rejoin_after: 10
)");
  EXPECT_TRUE(not_elastic.Has("rejoin_after", "needs an elastic job"));
}

TEST(DidYouMean, OnlyCloseWords) {
  EXPECT_EQ(DidYouMean("nodse", {"name", "nodes"}), "nodes");
  EXPECT_EQ(DidYouMean("Nodes", {"name", "nodes"}), "nodes");
  EXPECT_EQ(DidYouMean("completely", {"name", "nodes"}), "");
  // A huge value is no typo, and is not compared letter by letter (that took seconds per
  // 10 MB of a manifest's value).
  const std::string huge(64 << 20, 'n');
  const auto began = std::chrono::steady_clock::now();
  EXPECT_EQ(DidYouMean(huge, {"name", "nodes"}), "");
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(1));
}

}  // namespace
}  // namespace cadre::launch
