// Safetensors I/O at checkpoint size: 100 M float32 parameters (400 MB) in 100 tensors of
// 1000 x 1000, written with write_safetensors() (writev from the caller's memory, then fsync)
// and read back tensor by tensor with SafetensorsFile::read() (pread into the caller's memory).
//   BM_Write      write + fsync of the whole file
//   BM_ReadCold   open + validate + read every tensor, the file's pages dropped from the page cache
//                 first (posix_fadvise DONTNEED: the pages are clean after the fsync)
//   BM_ReadWarm   the same from the page cache
// The counter MB/s is decimal (1e6 bytes/s), as dd prints it. The file goes to $IO_BENCH_DIR
// (default: the current directory) and is removed at the end unless IO_BENCH_KEEP=1.
// bench/safetensors_io.sh runs these against dd on the same disk and the same file, in
// alternation: on a virtual disk, writing blocks never written before is slower than overwriting,
// so both must write over the same file.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"

namespace {

constexpr int kTensors = 100;
constexpr int64_t kRows = 1000, kCols = 1000;
constexpr size_t kTensorBytes = static_cast<size_t>(kRows * kCols) * sizeof(float);
constexpr double kTotalBytes = static_cast<double>(kTensors) * kTensorBytes;

std::string bench_file() {
  const char* dir = std::getenv("IO_BENCH_DIR");
  return std::string(dir && *dir ? dir : ".") + "/io_bench.safetensors";
}

// The parameters: one allocation, every page touched (as a trained model's are).
const std::vector<float>& parameters() {
  static const std::vector<float> p = [] {
    std::vector<float> v(static_cast<size_t>(kTensors) * kRows * kCols);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 9973) * 0.001f;
    return v;
  }();
  return p;
}

std::vector<pprt::TensorWrite> tensors() {
  std::vector<pprt::TensorWrite> ts;
  for (int i = 0; i < kTensors; ++i)
    ts.push_back({"layers." + std::to_string(i) + ".weight",
                  pprt::TensorDtype::F32,
                  {kRows, kCols},
                  parameters().data() + static_cast<size_t>(i) * kRows * kCols,
                  kTensorBytes});
  return ts;
}

void drop_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void remove_file(const std::string& path) {
  const char* keep = std::getenv("IO_BENCH_KEEP");
  if (!keep || std::string(keep) != "1") ::unlink(path.c_str());
}

void report(benchmark::State& state) {
  state.counters["MB/s"] = benchmark::Counter(
      kTotalBytes / 1e6, benchmark::Counter::kIsRate | benchmark::Counter::kIsIterationInvariant);
}

void BM_Write(benchmark::State& state) {
  const auto ts = tensors();
  const std::string path = bench_file();
  for (auto _ : state) pprt::write_safetensors(path, ts, {{"format", "pt"}});
  report(state);
  remove_file(path);
}

void read_all(benchmark::State& state, bool cold) {
  const std::string path = bench_file();
  pprt::write_safetensors(path, tensors(), {{"format", "pt"}});
  std::vector<float> dst(parameters().size());  // the model's memory, touched once
  const std::vector<int64_t> shape = {kRows, kCols};
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      drop_cache(path);
      state.ResumeTiming();
    }
    const pprt::SafetensorsFile f(path);
    for (int i = 0; i < kTensors; ++i)
      f.read("layers." + std::to_string(i) + ".weight", pprt::TensorDtype::F32, shape,
             dst.data() + static_cast<size_t>(i) * kRows * kCols, kTensorBytes);
    benchmark::DoNotOptimize(dst.data());
  }
  report(state);
  remove_file(path);
}

void BM_ReadCold(benchmark::State& state) {
  read_all(state, true);
}
void BM_ReadWarm(benchmark::State& state) {
  read_all(state, false);
}

BENCHMARK(BM_Write)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_ReadCold)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_ReadWarm)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
