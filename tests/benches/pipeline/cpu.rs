//! CPU time over the window, from `/proc` (Linux): this process's, and the whole machine's,
//! so that a run on a machine shared with other work says so, and a run that leaves cores
//! idle shows that it waited rather than computed. Elsewhere: nothing is reported.

use std::collections::BTreeMap;
use std::time::Instant;

use cascade_e2e::process::{TICKS_PER_SECOND, stat_ticks};

pub struct CpuClock {
    at: Instant,
    process: Option<u64>,
    machine: Option<(u64, u64)>,
    threads: BTreeMap<String, u64>,
}

/// Cores kept busy on average between two readings.
pub struct CpuUse {
    pub process: Option<f64>,
    pub machine: Option<f64>,
    pub cores: Option<u64>,
    /// By thread name (`cascade-writer`, `cascade-syncer`, the runtimes' `cascade` and
    /// `producers`…), threads of one name summed.
    pub threads: Vec<(String, f64)>,
}

impl CpuClock {
    pub fn start() -> CpuClock {
        CpuClock {
            at: Instant::now(),
            process: process_ticks(),
            machine: machine_ticks(),
            threads: thread_ticks(),
        }
    }

    pub fn stop(self) -> CpuUse {
        let secs = self.at.elapsed().as_secs_f64();
        let process = self
            .process
            .zip(process_ticks())
            .map(|(a, b)| b.saturating_sub(a) as f64 / TICKS_PER_SECOND / secs);
        let machine = self.machine.zip(machine_ticks());
        CpuUse {
            process,
            machine: machine.map(|((busy_a, _), (busy_b, _))| {
                busy_b.saturating_sub(busy_a) as f64 / TICKS_PER_SECOND / secs
            }),
            cores: std::thread::available_parallelism()
                .ok()
                .map(|n| n.get() as u64),
            threads: thread_ticks()
                .into_iter()
                .map(|(name, ticks)| {
                    let before = self.threads.get(&name).copied().unwrap_or(0);
                    let used = ticks.saturating_sub(before) as f64 / TICKS_PER_SECOND / secs;
                    (name, used)
                })
                .filter(|(_, used)| *used >= 0.01)
                .collect(),
        }
    }
}

/// utime + stime of this process.
fn process_ticks() -> Option<u64> {
    stat_ticks(&std::fs::read_to_string("/proc/self/stat").ok()?).map(|(_, ticks)| ticks)
}

/// utime + stime of each thread of this process, summed by thread name.
fn thread_ticks() -> BTreeMap<String, u64> {
    let mut by_name = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return by_name;
    };
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        if let Some((name, ticks)) = stat_ticks(&stat) {
            *by_name.entry(name).or_insert(0) += ticks;
        }
    }
    by_name
}

/// (busy, idle) ticks of all CPUs, from the first line of `/proc/stat`.
fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal …; idle and iowait are not busy.
    let idle = ticks.get(3)? + ticks.get(4)?;
    let busy = ticks.iter().take(8).sum::<u64>() - idle;
    Some((busy, idle))
}
