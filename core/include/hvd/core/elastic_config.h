// SPDX-License-Identifier: Apache-2.0
// Elastic mode's variables (set by hvdrun --min-np for every rank), read where Config reads the
// others (config.cc, the one getenv of hvd) but kept apart from the runtime's Config: the
// elastic layer (hvd/optim/elastic_store.h) reads them without a runtime.
#pragma once

#include <string>

#include "hvd/core/config.h"

namespace hvd::core {

struct ElasticConfig {
  /// Where this host keeps the last committed snapshot (HVD_ELASTIC_STATE_DIR); empty outside
  /// elastic mode.
  std::string state_dir;
  /// Written when the elastic function returns (HVD_ELASTIC_COMPLETION_FILE); empty: none.
  std::string completion_file;
  /// Where hvdrun's rank wrapper writes host changes, "<seq> <bits>" (HVD_ELASTIC_HOSTS_FILE);
  /// empty: none.
  std::string hosts_file;
  /// Where this rank reports progress for hvdrun's step watchdog (HVD_ELASTIC_PROGRESS_FILE,
  /// set by the rank wrapper); empty: none.
  std::string progress_file;
  /// The job's snapshot key, 64 hexadecimal digits (HVD_ELASTIC_KEY: hvdrun makes it for each
  /// elastic job and passes it only in its ranks' environment); empty: none. Secret: never
  /// logged. The snapshot store parses it (hvd/optim/elastic_store.h).
  std::string key;

  static ElasticConfig from_env(const Config::Lookup& lookup);
  /// Reads the process environment.
  static ElasticConfig from_process_env();
};

}  // namespace hvd::core
