// ringcast-sink's entry point: parse options, bind, announce the address, serve until SIGTERM
// or SIGINT, then print the final stats JSON. See docs/sink.md.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string>
#include <thread>

#include "tools/sink/options.h"
#include "tools/sink/server.h"

namespace {

void write_port_file(const std::string& path, uint16_t port) {
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) throw std::runtime_error("cannot write --port-file " + path);
  std::fprintf(f, "%u\n", port);
  if (std::fclose(f) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("cannot write --port-file " + path);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ringcast::sink;
  // Signals are taken synchronously by this thread; the workers never see them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringcast-sink: %s\n", e.what());
    return 2;
  }
  try {
    Sink sink(options);
    if (!options.port_file.empty()) write_port_file(options.port_file, sink.port());
    std::printf("listening on %s\n", sink.address().c_str());
    std::fflush(stdout);
    if (!options.quiet) {
      std::fprintf(stderr,
                   "ringcast-sink: %s%s, verify=%s, %zu fault rule(s), %d thread(s), seed %llu\n",
                   options.tls_cert.empty() ? "http://" : "https://", sink.address().c_str(),
                   verify_mode_name(options.verify), options.faults.size(), options.threads,
                   static_cast<unsigned long long>(options.seed));
    }
    std::thread server([&sink] { sink.run(); });
    int sig = 0;
    sigwait(&set, &sig);
    sink.stop();
    server.join();
    std::string stats = sink.stats_json();
    std::printf("%s\n", stats.c_str());
    std::fflush(stdout);
    if (!options.stats_file.empty()) {
      FILE* f = std::fopen(options.stats_file.c_str(), "w");
      if (f != nullptr) {
        std::fprintf(f, "%s\n", stats.c_str());
        std::fclose(f);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringcast-sink: %s\n", e.what());
    return 1;
  }
  return 0;
}
