//! Threads of their own for a closed loop's slots. On tokio's shared runtime a slot's
//! task and its connection's task (which hyper spawns) run on whichever worker is
//! free, so each request woke the other thread once or twice (a futex each way). Here
//! each thread runs a single-threaded runtime holding a share of the slots, so a slot
//! and its connection stay on one thread, as oha runs its workers. The records still
//! go to the recorder on the main runtime, through its channel.

use std::thread::JoinHandle;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// Runtimes on threads of their own, each running until this is dropped.
pub(super) struct SlotThreads {
    threads: Vec<SlotThread>,
}

struct SlotThread {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl SlotThreads {
    /// One thread per core, no more than `slots`. Fails as starting a thread or a
    /// runtime fails (out of memory or of threads).
    pub(super) fn start(slots: usize) -> std::io::Result<SlotThreads> {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let threads = (0..cores.min(slots).max(1))
            .map(|i| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let handle = runtime.handle().clone();
                let (stop, stopped) = oneshot::channel::<()>();
                let thread = std::thread::Builder::new()
                    .name(format!("redline-slots-{i}"))
                    .spawn(move || {
                        // Drives the slots spawned on `handle` until told to stop.
                        let _ = runtime.block_on(stopped);
                    })?;
                Ok(SlotThread {
                    handle,
                    stop: Some(stop),
                    thread: Some(thread),
                })
            })
            .collect::<std::io::Result<_>>()?;
        Ok(SlotThreads { threads })
    }

    /// The runtime slot `slot` runs on: slots dealt round the threads.
    pub(super) fn for_slot(&self, slot: usize) -> &Handle {
        &self.threads[slot % self.threads.len()].handle
    }
}

impl Drop for SlotThreads {
    /// Stops every thread and waits for it: by then its slots have ended (the stage
    /// waited for them), so each returns at once.
    fn drop(&mut self) {
        for thread in &mut self.threads {
            if let Some(stop) = thread.stop.take() {
                let _ = stop.send(());
            }
        }
        for thread in &mut self.threads {
            if let Some(thread) = thread.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slots_are_dealt_round_threads_of_their_own_which_stop_when_dropped() {
        let threads = SlotThreads::start(64).unwrap();
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(threads.threads.len(), cores.min(64));
        let mut names = Vec::new();
        for slot in 0..2 * cores {
            let name = threads
                .for_slot(slot)
                .spawn(async { std::thread::current().name().map(str::to_owned) })
                .await
                .unwrap();
            names.push(name.unwrap());
        }
        let expected: Vec<String> = (0..2 * cores)
            .map(|slot| format!("redline-slots-{}", slot % cores))
            .collect();
        assert_eq!(names, expected);
        let handle = threads.for_slot(0).clone();
        drop(threads);
        let late = handle.spawn(async {});
        assert!(
            late.await.is_err(),
            "a stopped thread's runtime runs nothing more"
        );
        assert_eq!(
            SlotThreads::start(1).unwrap().threads.len(),
            1,
            "no more than slots"
        );
    }
}
