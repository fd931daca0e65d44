// Mounting the power-cut filesystem in an end-to-end test (docs/powercut-fs.md). It needs root
// and /dev/fuse: without them the test is skipped, or failed when CI=true (CI has both, and a
// skip there would hide a broken install).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "tests/support/powercut/powercut_fs.h"
#include "tests/support/require.h"

namespace ringcast::e2e {

// Mounts a power-cut filesystem on `path` into `out`. When it cannot, `out` stays null and the
// test is skipped (failed under CI=true): the caller returns when `out` is null.
inline void mount_powercut_or_skip(const std::string& path, const test::PowerCutFs::Options& o,
                                   std::unique_ptr<test::PowerCutFs>& out) {
  std::string error;
  out = test::PowerCutFs::mount(path, o, &error);
  if (out) return;
  RINGCAST_SKIP_MISSING() << "cannot mount the power-cut filesystem (root and /dev/fuse): "
                          << error;
}

}  // namespace ringcast::e2e
