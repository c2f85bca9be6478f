// serve_main.cpp: `facegen serve`: its flags, the models (one or more, --model NAME=PATH, each with
// its own backend per GPU, or the CPU's, and its own batcher), the HTTP server (http_server.hpp), and
// a clean stop on a signal: stop accepting, finish every request in flight, end the workers, exit 0.
// The line that says where it listens goes to stderr whatever --quiet says: with --port 0 it is the
// only way to learn the port.
//
// Limits on clients (docs/service.md): --max-connections held at once (more are answered 503 at
// once); --idle-timeout-s for a connection with no request begun; --io-timeout-s for a request's head
// and for its body, and for an answer the client takes nothing of. Connections cost the event loops
// (--io-threads) no thread each; a request waiting for images holds no thread (the batcher tells it when
// they are made); --request-threads read large bodies and encode the answers that take CPU.
//
// Signals are blocked in every thread (they inherit the mask of this one, set before any is made)
// and taken by one thread with sigwait, which then calls the server's stop() (not allowed in a
// signal handler).
//
// Memory: every answer's buffers (up to a few hundred MiB for a large mosaic) are allocated and freed
// on the thread that serves it. glibc raises its mmap threshold after the first such free, so later
// ones come from per-thread heaps that keep what they freed: over 180 s of mixed load the resident
// size crept from 254 to 371 MiB (bench/serve.sh, CPU backend). With the threshold held at 256 KiB
// those buffers go back to the system when freed and the size stayed between 178 and 219 MiB.
#include "serve/serve_main.hpp"

#include <cxxopts.hpp>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "common/command_line.hpp"
#include "common/content_hash.hpp"
#include "common/errors.hpp"
#include "common/path_parts.hpp"
#include "common/precision.hpp"
#include "common/threads.hpp"
#include "generator/backend.hpp"
#include "generator/network.hpp"
#include "mpi/launch.hpp"
#include "mpi/serve_ranks.hpp"
#include "serve/batcher.hpp"
#include "serve/http_server.hpp"
#include "serve/metrics.hpp"
#include "serve/oip.hpp"
#include "serve/request_threads.hpp"
#include "serve/routes.hpp"

namespace facegen::serve {
namespace {

// A model to serve: its name in the URLs and its file.
struct ModelFlag {
  std::string name;
  std::string path;
};

struct ServeFlags {
  std::vector<ModelFlag> models;  // the first is the default
  std::string token;
  int batch_workers = 2;
  ServerOptions server;
  bool max_connections_given = false;
  int request_threads = 64, png_level = kDefaultPngLevel;
  BackendOptions backend;
  BatcherOptions batcher;
  bool quiet = false;
};

void say(const std::string& line) {
  const std::string text = "facegen serve: " + line + "\n";
  std::cerr.write(text.data(), static_cast<std::streamsize>(text.size())).flush();
}

cxxopts::Options serve_command_line() {
  using cxxopts::value;
  cxxopts::Options options("facegen serve", "Serves images over HTTP from a warm generator (docs/service.md).");
  options.custom_help("[options]");
  options.add_options()
      ("m,model", "a generator to serve, as NAME=PATH (at /v1/models/NAME/ and /v2/models/NAME/) or PATH (named "
       "facegen); give it once per model, the first the default (default: the shipped faces model)",
       value<std::string>(), "[NAME=]PATH")
      ("d,device", "auto, cuda or cpu (auto: every usable NVIDIA GPU, else the CPU); synthetic: images from a cheap formula "
       "instead of a model (the batch tool's --device synthetic), to measure the service around it",
       value<std::string>()->default_value("auto"), "DEVICE")
      ("p,precision", "GPU arithmetic: fp32, tf32 or bf16", value<std::string>()->default_value("fp32"), "P")
      ("port", "TCP port to listen on (0: any free port; the line on stderr that says where it listens comes "
       "even with --quiet)", value<std::string>()->default_value("8080"), "PORT")
      ("host", "address to listen on (0.0.0.0: every interface)", value<std::string>()->default_value("127.0.0.1"), "HOST")
      ("max-batch", "most images in one backend batch", value<std::string>()->default_value("256"), "N")
      ("batch-workers", "streams of batches per GPU (a GPU is kept busier by a few), or synthetic workers; the CPU has one",
       value<std::string>()->default_value("2"), "N")
      ("max-delay-ms", "longest an image waits for its batch to fill, in milliseconds (0: a free worker takes what is queued)", value<std::string>()->default_value("0"), "T")
      ("max-queue", "most images waiting at once; more are refused with 429", value<std::string>()->default_value("16384"), "N")
      ("token-file", "a file holding a token: /v1/ and /metrics then need 'Authorization: Bearer TOKEN'",
       value<std::string>(), "PATH")
      ("max-connections", "connections held at once; a new one past them is answered 503 at once", value<std::string>()->default_value("10000"), "N")
      ("io-timeout-s", "seconds a request has for its head (from its first byte) and for its body; a client that takes none "
       "of an answer for this long is closed", value<std::string>()->default_value("10"), "S")
      ("idle-timeout-s", "seconds a connection may wait with no request begun (new, or kept alive after an answer)",
       value<std::string>()->default_value("5"), "S")
      ("io-threads", "event loops holding the connections", value<std::string>()->default_value("2"), "N")
      ("request-threads", "threads for the requests that take CPU (reading a large body, encoding a tar, a mosaic or numbers); "
       "none waits for images",
       value<std::string>()->default_value("64"), "N")
      ("png-level", "PNG compression of png, tar and mosaic answers, as facegen --png-level: 0 stores the pixels "
       "(fastest, the default), 1 to 12 compress harder", value<std::string>()->default_value("0"), "L")
      ("t,threads", "CPU backend threads (0: all this process may use)", value<std::string>()->default_value("0"), "N")
      ("q,quiet", "print nothing but errors")
      ("h,help", "print this help");
  return options;
}

int64_t whole_flag(const cxxopts::ParseResult& args, const char* name, int64_t low, int64_t high) {
  const std::string text = args[name].as<std::string>();
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || value < low || value > high) {
    throw UserError("--" + std::string(name) + " expects a whole number from " + std::to_string(low) + " to " +
                    std::to_string(high) + ", got '" + text + "'");
  }
  return value;
}

// The token of --token-file: its text without the white space around it, at most 4 KiB, not empty.
std::string read_token(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw UserError("cannot read --token-file " + path + ": " + std::strerror(errno));
  std::string token((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const size_t first = token.find_first_not_of(" \t\r\n");
  token = first == std::string::npos ? "" : token.substr(first, token.find_last_not_of(" \t\r\n") - first + 1);
  if (token.empty() || token.size() > 4096 || token.find_first_of(" \t\r\n") != std::string::npos) {
    throw UserError("--token-file " + path + " must hold one token of 1 to 4096 characters without spaces");
  }
  return token;
}

DeviceKind device_flag(const std::string& name) {
  if (name == "auto") return DeviceKind::Auto;
  if (name == "cuda") return DeviceKind::Cuda;
  if (name == "cpu") return DeviceKind::Cpu;
  if (name == "synthetic") return DeviceKind::Synthetic;
  throw UserError("unknown --device '" + name + "' (expected auto, cuda, cpu or synthetic; cuda is the NVIDIA GPU)");
}

// A name that URLs may hold as they are: letters, digits, '_', '-', '.', not first; and not "stats",
// which /v2/models/stats (every model's statistics) takes.
bool model_name_ok(const std::string& name) {
  if (name.empty() || name.size() > 64 || !std::isalnum(static_cast<unsigned char>(name[0])) || name == "stats") return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; });
}

// --model NAME=PATH or PATH, in the order given; the shipped model, named facegen, without one. Synthetic
// images are made without a model: one, named facegen, with no file, and --model refused.
std::vector<ModelFlag> model_flags(const cxxopts::ParseResult& args, const std::string& default_model) {
  if (device_flag(args["device"].as<std::string>()) == DeviceKind::Synthetic) {
    if (args.count("model")) throw UserError("--model names the generator, and --device synthetic draws test images without one");
    return {{kOipModelName, ""}};
  }
  std::vector<ModelFlag> models;
  for (const cxxopts::KeyValue& given : args.arguments()) {
    if (given.key() != "model") continue;
    const std::string& value = given.value();
    const size_t equals = value.find('=');
    const std::string name = equals == std::string::npos ? "" : value.substr(0, equals);
    if (equals != std::string::npos && name.find('/') == std::string::npos) {
      if (!model_name_ok(name)) {
        throw UserError("--model " + value + ": the name '" + name + "' must be letters, digits, '_', '-' and '.' (a letter "
                        "or digit first, at most 64, not 'stats'), as the URLs /v2/models/NAME/ hold it");
      }
      models.push_back({name, value.substr(equals + 1)});
    } else {
      models.push_back({"", value});
    }
  }
  if (models.empty()) models.push_back({"", default_model});
  for (size_t k = 0; k < models.size(); ++k) {
    if (models[k].name.empty() && models.size() > 1) {
      throw UserError("--model " + models[k].path + " has no name, and several models are served: give each as --model "
                      "NAME=PATH");
    }
    if (models[k].name.empty()) models[k].name = kOipModelName;
    for (size_t j = 0; j < k; ++j) {
      if (models[j].name == models[k].name) throw UserError("--model names " + models[k].name + " twice; give each model a name of its own");
    }
  }
  return models;
}

ServeFlags read_flags(const cxxopts::ParseResult& args, const std::string& default_model) {
  ServeFlags flags;
  flags.models = model_flags(args, default_model);
  flags.server.host = args["host"].as<std::string>();
  flags.server.port = static_cast<int>(whole_flag(args, "port", 0, 65535));
  flags.server.max_connections = whole_flag(args, "max-connections", 1, 1 << 24);
  flags.max_connections_given = args["max-connections"].count() > 0;
  flags.server.io_timeout_s = static_cast<int>(whole_flag(args, "io-timeout-s", 1, 3600));
  flags.server.idle_timeout_s = static_cast<int>(whole_flag(args, "idle-timeout-s", 1, 3600));
  flags.server.io_threads = static_cast<int>(whole_flag(args, "io-threads", 1, 64));
  flags.server.limits.max_body_bytes = kMaxBodyBytes;
  flags.request_threads = static_cast<int>(whole_flag(args, "request-threads", 1, 4096));
  flags.png_level = static_cast<int>(whole_flag(args, "png-level", 0, kMaxPngLevel));
  flags.backend.device = device_flag(args["device"].as<std::string>());
  flags.backend.precision = parse_precision(args["precision"].as<std::string>());
  flags.backend.threads = static_cast<int>(whole_flag(args, "threads", 0, 4096));
  flags.batcher.max_batch = whole_flag(args, "max-batch", 1, 1 << 16);
  flags.batch_workers = static_cast<int>(whole_flag(args, "batch-workers", 1, 64));
  flags.batcher.max_delay_ms = static_cast<double>(whole_flag(args, "max-delay-ms", 0, 10000));
  flags.batcher.max_queue = whole_flag(args, "max-queue", kMaxRequestImages, int64_t{1} << 24);
  flags.backend.max_batch = static_cast<int>(flags.batcher.max_batch);
  flags.quiet = args.count("quiet") > 0;
  if (args.count("token-file")) flags.token = read_token(args["token-file"].as<std::string>());
  return flags;
}

// A model loaded: its weights and what the service says of it.
struct LoadedModel {
  std::string name;
  Network net;
  ServiceFacts facts;
  std::string weights;  // what identifies its weights in the images' tag: its file's digest, else theirs
};

LoadedModel load_model(const ModelFlag& flag, const ServeFlags& flags) {
  if (flags.backend.device == DeviceKind::Synthetic) {  // no file: the images depend on the formula alone
    LoadedModel model{flag.name, Network(), {}, "synthetic"};
    model.facts.precision = precision_name(flags.backend.precision);
    model.facts.spec = model.net.spec();
    model.facts.png_level = flags.png_level;
    return model;
  }
  const InputFile file(flag.path, InputKind::Model);
  // The digest first (a pipe's bytes are the loader's alone): the load's last check covers both reads.
  const std::string digest = file.regular() ? file.digest().hex() : "";
  LoadedModel model{flag.name, load_network(file), {}, ""};
  model.facts.model = base_name(flag.path);
  model.facts.model_xxh3 = digest;
  model.facts.precision = precision_name(flags.backend.precision);
  model.facts.spec = model.net.spec();
  model.facts.png_level = flags.png_level;
  const std::vector<float>& floats = model.net.floats();
  model.weights = !model.facts.model_xxh3.empty() ? model.facts.model_xxh3
                                                   : content_digest(floats.data(), floats.size() * sizeof(float)).hex();
  return model;
}

// --batch-workers backends per usable GPU (device auto or cuda), each making 8-bit pixels on the GPU,
// and one making float32 (the npy answers); --batch-workers synthetic ones of a thread each; else one
// on the CPU. The device's name into `device`.
std::vector<std::unique_ptr<Backend>> make_backends(const Network& net, const ServeFlags& flags, std::string& device) {
  const DeviceChoice choice = choose_device(flags.backend);
  std::vector<std::unique_ptr<Backend>> backends;
  if (choice.options.device == DeviceKind::Cuda) {
    std::string reason;
    const int gpus = usable_gpu_count(&reason);
    for (int gpu = 0; gpu < gpus; ++gpu) {
      BackendOptions options = choice.options;
      options.cuda_device = gpu;
      options.sleep_while_waiting = true;  // the cores serve the connections
      options.images = ImageEncoding::Rgb8;
      for (int k = 0; k < flags.batch_workers; ++k) backends.push_back(make_cuda_backend(net, options));
      options.images = ImageEncoding::Float32;
      backends.push_back(make_cuda_backend(net, options));
    }
    device = "cuda";
    return backends;
  }
  if (choice.options.device == DeviceKind::Synthetic) {
    BackendOptions options = choice.options;
    options.threads = 1;
    for (int k = 0; k < flags.batch_workers; ++k) backends.push_back(make_synthetic_backend(options));
    device = "synthetic";
    return backends;
  }
  if (!flags.quiet && choice.fell_back && device.empty()) say(choice.notice(resolve_threads(choice.options.threads)));
  backends.push_back(make_cpu_backend(net, choice.options));
  device = "cpu";
  return backends;
}

// Waits for SIGTERM, SIGINT, SIGHUP or SIGUSR2 (blocked in every thread), then stops the server (a
// stop asked before it runs is kept). SIGUSR2 is the stop that run_parallel.sh --serve hands on:
// mpirun forwards it to every rank (SIGTERM would make mpirun kill the ranks a few seconds later,
// answers in flight or not); ranks other than 0 keep it blocked. SIGUSR1 (sent by StopperThread)
// ends the wait without stopping anything.
void stop_on_signal(HttpServer& server, Service& service, const sigset_t& signals, bool quiet) {
  int signal = 0;
  if (sigwait(&signals, &signal) != 0 || signal == SIGUSR1) return;
  service.stopping = true;
  if (!quiet) say(std::string("stopping on SIG") + sigabbrev_np(signal) + ": finishing the requests in flight");
  server.stop();
}

// The thread of stop_on_signal, joined before the server it stops is destroyed: its destructor wakes
// the thread with SIGUSR1 in case no signal came.
struct StopperThread {
  std::thread thread;
  ~StopperThread() {
    pthread_kill(thread.native_handle(), SIGUSR1);  // pending and ignored if it already returned
    thread.join();
  }
};

// --max-connections as the open-file limit allows: raised toward what it needs; a limit given that
// cannot be met is refused, the default one lowered to fit (with a notice).
int64_t connections_that_fit(const ServeFlags& flags) {
  const int64_t wanted = flags.server.max_connections;
  const int64_t files = raise_open_file_limit(wanted + kOpenFilesBesideConnections);
  if (files >= wanted + kOpenFilesBesideConnections) return wanted;
  const int64_t fit = files - kOpenFilesBesideConnections;
  if (flags.max_connections_given || fit < 1) {
    throw UserError("--max-connections " + std::to_string(wanted) + " needs " + std::to_string(wanted + kOpenFilesBesideConnections) +
                    " open files, and this process may open " + std::to_string(files) + " (ulimit -Hn); give at most " +
                    std::to_string(std::max<int64_t>(fit, 0)));
  }
  if (!flags.quiet) say("at most " + std::to_string(fit) + " connections at once: this process may open " + std::to_string(files) + " files (ulimit -Hn)");
  return fit;
}

// Where the service listens, and what it serves: one line on stderr, printed whatever --quiet says.
std::string listening_line(const std::string& host, int port, const std::vector<LoadedModel>& models, size_t workers,
                           const std::string& described) {
  std::string served;
  for (const LoadedModel& model : models) {
    served += (served.empty() ? "" : ", ") + model.name + " (" + (model.facts.model.empty() ? "synthetic images" : model.facts.model) + ")";
  }
  return "listening on http://" + host + ":" + std::to_string(port) + "/ with " + std::to_string(workers) +
         (workers == 1 ? " worker (" : " workers (") + described + (workers == 1 ? ")" : ", ...)") +
         (models.size() == 1 ? ", model " : " per model, models ") + served;
}

// The service over each model's `backends` until a signal stops it: returns 0 once every accepted
// request is answered and the workers have ended.
int run_service(const ServeFlags& flags, const std::vector<LoadedModel>& models, const std::string& device,
                const sigset_t& signals, std::vector<std::vector<std::unique_ptr<Backend>>> backends) {
  std::vector<ModelFacts> facts;
  for (const LoadedModel& model : models) {
    facts.push_back({model.name, model.facts.model, model.facts.model_xxh3, model.facts.precision, device});
  }
  Metrics metrics(flags.batcher.max_batch, facts);
  const size_t workers = backends.front().size();
  const std::string described = backends.front().front()->describe();
  std::vector<std::unique_ptr<Batcher>> batchers;
  for (size_t k = 0; k < models.size(); ++k) {
    BatcherOptions options = flags.batcher;
    options.latent_dim = models[k].net.spec().latent_dim;
    options.image_channels = models[k].net.spec().image_channels;
    options.image_size = models[k].net.spec().image_size;
    options.png_level = flags.png_level;
    batchers.push_back(std::make_unique<Batcher>(std::move(backends[k]), options,
                                                 [&metrics, k](const BatchReport& report) { metrics.batch(k, report); }));
  }
  Service service{{}, metrics, flags.token};
  service.max_batch = flags.batcher.max_batch;
  service.max_delay_ms = flags.batcher.max_delay_ms;
  for (size_t k = 0; k < models.size(); ++k) {
    service.models.push_back({models[k].name, *batchers[k], models[k].facts, device,
                              image_tag(models[k].facts, device, models[k].weights)});
  }
  RequestThreads request_threads(flags.request_threads);
  service.request_threads = &request_threads;
  const Routes routes(service);
  ServerOptions options = flags.server;
  options.max_connections = connections_that_fit(flags);
  HttpServer server(options, routes, metrics, request_threads);  // listening from here
  const StopperThread stopper{std::thread(stop_on_signal, std::ref(server), std::ref(service), std::cref(signals), flags.quiet)};
  say(listening_line(options.host, server.port(), models, workers, described));
  server.run();  // returns once stop() was called and the requests in flight are answered
  for (const auto& batcher : batchers) batcher->stop();
  if (!flags.quiet) say("stopped");
  return 0;
}

// Large buffers from mmap, returned when freed (see the file comment), unless the user set glibc's
// threshold (MALLOC_MMAP_THRESHOLD_ or GLIBC_TUNABLES) for this run.
void keep_large_buffers_returnable() {
#ifdef __GLIBC__
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || (tunables && std::strstr(tunables, "mmap_threshold"))) return;
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
#endif
}

// Signals blocked before any thread is made (the backends', MPI's, the server's), the models loaded,
// then the service: in this process alone, or as rank 0 of an MPI job whose every rank generates (one
// model: the ranks' loop serves one network).
int serve(const ServeFlags& flags) {
  keep_large_buffers_returnable();
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::vector<LoadedModel> models;
  for (const ModelFlag& flag : flags.models) models.push_back(load_model(flag, flags));
  std::vector<std::vector<std::unique_ptr<Backend>>> backends;
  std::string device;
  if (mpi::detect_launch().kind == mpi::LaunchKind::Rank) {
    if (models.size() > 1) {
      throw UserError("under mpirun or srun, facegen serve serves one model over its ranks; give one --model (several "
                      "models are one process's)");
    }
    device = device_name(choose_device(flags.backend).options.device);
    return mpi::serve_as_ranks(models.front().net, flags.backend, [&](std::vector<std::unique_ptr<Backend>> ranks) {
      backends.push_back(std::move(ranks));
      return run_service(flags, models, device, signals, std::move(backends));
    });
  }
  for (const LoadedModel& model : models) backends.push_back(make_backends(model.net, flags, device));
  return run_service(flags, models, device, signals, std::move(backends));
}

}  // namespace

int serve_main(int argc, char** argv, const std::string& default_model) {
  cxxopts::Options options = serve_command_line();
  try {
    const auto args = options.parse(argc, argv);
    refuse_repeated_flags(args, {"model"});  // --model once per model
    if (args.count("help")) {
      std::cout << options.help() << "\nExit status: 0 stopped by SIGTERM, SIGINT, SIGHUP or SIGUSR2, 1 bad input, 2 bad "
                                     "command line, 3 internal or device fault.\n";
      return 0;
    }
    if (!args.unmatched().empty()) {
      say("unexpected argument '" + args.unmatched().front() + "' (see facegen serve --help)");
      return kExitUsage;
    }
    return serve(read_flags(args, default_model));
  } catch (const cxxopts::exceptions::exception& e) {
    say(command_line_problem(e) + " (see facegen serve --help)");
    return kExitUsage;
  } catch (...) {
    const Failure failure = describe_current_exception();
    say((failure.exit_code == kExitInput ? "error: " : "fault: ") + failure.message);
    return failure.exit_code;
  }
}

}  // namespace facegen::serve
