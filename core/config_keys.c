/*
 * The documented keys of section [engine]. conf/transferengine.ini and
 * docs/config.md repeat this table (tests/unit/test_config.c checks that
 * every key here appears in conf/transferengine.ini).
 */
#include <stddef.h>

#include "config.h"

const struct te_config_key te_engine_keys[] = {
    {"plugin", "loopback",
     "transport plugin name, or a path to a .so"},
    {"plugin_path", "",
     "extra colon-separated directories searched for libte-plugin-NAME.so, "
     "after TE_PLUGIN_PATH and before the install dir"},
    {"groups", "1",
     "number of NIC groups, each with its own worker thread; typically one "
     "per GPU"},
    {"nics_per_group", "1",
     "NICs per group; group g uses plugin devices g*n .. g*n+n-1 unless "
     "group_nics is set"},
    {"group_nics", "",
     "explicit device indices per group: groups separated by ';', indices "
     "by ',', e.g. \"0,1;2,3\""},
    {"worker_cpus", "",
     "CPU to pin each group's worker to, comma separated, one per group; "
     "empty = not pinned"},
    {"submit_queue_depth", "4096",
     "requests that may wait in a group's submission queue; te_submit "
     "returns -EAGAIN beyond"},
    {"completion_queue_depth", "65536",
     "initial room for completions of callback-less requests waiting for "
     "te_poll_completions (the queue grows; nothing is dropped)"},
    {"nic_queue_depth", "0",
     "send queue depth asked of each NIC; 0 = plugin default"},
    {"recv_depth", "64",
     "receive buffers kept posted per NIC for te_submit SEND messages"},
    {"max_msg_size", "4096", "largest SEND message, bytes"},
    {"imm_table_size", "65536",
     "distinct immediate values the ImmCounter can track"},
    {"idle_spin_us", "50",
     "microseconds an idle worker busy-polls before it starts sleeping"},
    {"idle_spin_max_us", "2500",
     "ceiling of adaptive spinning: an idle worker or callback thread whose "
     "work came back within this many microseconds after it went idle "
     "spins up to twice that gap next time (never more than this), and "
     "returns to idle_spin_us / callback_spin_us after a longer gap; "
     "<= those = fixed spins (docs/progress.md)"},
    {"idle_sleep_us", "20",
     "microseconds an idle worker sleeps between polls after spinning, "
     "where it cannot block (engine.idle_wait = sleep, or a plugin without "
     "wait objects)"},
    {"idle_sleep_max_us", "1000",
     "idle_wait = block with a plugin without wait objects (efa over shm "
     "with efa.shm_bell = false): with no request of the group in flight, the worker's nap between "
     "polls grows to an eighth of the time it has been idle, up to this "
     "many microseconds (a submission still ends it at once); <= "
     "idle_sleep_us = fixed naps of idle_sleep_us"},
    {"idle_wait", "block",
     "what an idle worker does after idle_spin_us: block = wait in epoll "
     "on its NICs' wait objects and a doorbell that te_submit rings (no CPU "
     "while idle; where the plugin has no wait objects, naps on that "
     "doorbell, growing to idle_sleep_max_us); sleep = poll every "
     "idle_sleep_us (the behaviour before plugin ABI 1.3)"},
    {"progress", "thread",
     "who moves the engine: thread = a worker thread per group and a "
     "callback thread; caller = no engine threads, the application calls "
     "te_progress()/te_progress_wait() and callbacks run inside them "
     "(docs/progress.md)"},
    {"busy_wait", "nap",
     "idle_wait = block, with requests of the group in flight: nap = sleep "
     "idle_sleep_us between polls (a submission still wakes the worker at "
     "once; completions are taken in batches, and peers need not ring it); "
     "block = block on the NICs' wait objects as when nothing is in flight "
     "(docs/progress.md)"},
    {"waiter_progress", "false",
     "progress = thread: true = a thread waiting in te_imm_wait() runs the "
     "loop turn of a group whose worker is blocked and has an event, "
     "instead of waiting for the worker to wake (one thread wake-up less "
     "where workers sleep between operations; about 2-3 us more per "
     "operation where they are awake or wake-ups are cheap); false = only "
     "the workers progress (docs/progress.md)"},
    {"idle_block_max_ms", "1000",
     "longest a blocked idle worker waits with no event and no deadline due "
     "(a safety net for a transport whose wait object misses an event, and "
     "how often loopback looks for a peer process it has no pidfd of); "
     "0 = until an event or a deadline"},
    {"callback_spin_us", "20",
     "microseconds the callback thread spins before blocking"},
    {"heartbeat_ms", "1000",
     "a peer that has had nothing outstanding on a NIC for this long gets a "
     "zero-length write (no immediate) at the place the last write went, or "
     "without a key if it was never written to (heartbeat_keyless); a "
     "connection error makes it down, a write that never completes is "
     "caught by peer_timeout_ms; 0 = never (docs/reliability.md)"},
    {"heartbeat_keyless", "true",
     "probe peers this engine never wrote to as well (a receiver learns of "
     "its sender's death), with a zero-length write without a key on one "
     "NIC; false = only peers written to (docs/reliability.md)"},
    {"shard_min_bytes", "0",
     "WRITE and READ requests shorter than this go whole on one NIC of the "
     "route (rotating from request to request) instead of being split over "
     "all of them: 1 immediate instead of k; 0 = always split "
     "(docs/sharding.md)"},
    {"shard_by_speed", "true",
     "split WRITE/READ bytes in proportion to the NICs' link speeds when the "
     "NICs of a group differ (and all report a speed); false = equal "
     "shards"},
    {"callback_cpu", "",
     "CPU to pin the callback thread to; empty = not pinned (a latency-bound "
     "application with a spinning callback thread gives it a core of its "
     "own)"},
    {"topology", "auto",
     "NIC groups and worker CPUs: auto = one group per GPU with the NICs on "
     "its PCIe switch (else its NUMA node) and a core of its NUMA node, "
     "when the plugin's NICs have PCI addresses (virtual NICs use the keys "
     "below as given); group_nics/worker_cpus entries override per group; "
     "off = groups, "
     "nics_per_group, group_nics and worker_cpus exactly as given"},
    {"sysfs_root", "/sys",
     "where topology = auto reads the PCI tree, CPUs and NUMA nodes (a "
     "fixture tree in tests)"},
    {"nic_include", "",
     "comma-separated fnmatch patterns on NIC name or PCI address; when set, "
     "only matching NICs are used (e.g. \"rdmap*\")"},
    {"nic_exclude", "",
     "comma-separated fnmatch patterns on NIC name or PCI address of NICs "
     "never used (e.g. \"mlx5_bond*,irdma*\")"},
    {"request_timeout_ms", "60000",
     "default deadline of a request (te_request.timeout_ms = 0); 0 = none"},
    {"peer_timeout_ms", "10000",
     "a peer with operations outstanding and no completion from it for this "
     "long is declared down and its requests fail; 0 = never"},
    {"require", "any",
     "capabilities every path must have, else te_engine_create (or "
     "te_mr_reg of that memory kind) fails naming what is missing instead "
     "of falling back: any, fast (= zero_copy,native_imm,native_rma,"
     "device_direct), or a comma list of zero_copy, native_imm, native_rma, "
     "device_direct, hardware, auto_progress (docs/paths.md); degraded "
     "paths are logged once either way"},
    {"auth_key", "",
     "shared secret of the job (text, at least 16 bytes): every transport "
     "then authenticates its peers at connection set-up and refuses those "
     "without it; empty = no authentication (docs/security.md). Prefer "
     "auth_key_file: this text is visible to whoever reads the config"},
    {"auth_key_file", "",
     "path of a file holding the shared secret (trailing newlines dropped); "
     "refused when group or others may access it (chmod 600); set this or "
     "auth_key, not both"},
    {"log_level", "1",
     "0 errors, 1 warnings, 2 info, 3 debug; messages go to the log sink "
     "(te_set_log_fn, default stderr; docs/logging.md)"},
    {NULL, NULL, NULL},
};
