//! Background threads that must never slow a decision (shadow plugins, the trace exporter) run
//! in Linux's idle scheduling class: on a core only when nothing else there wants to run.

/// Puts the calling thread in the idle scheduling class; where that class is refused, at the
/// lowest priority of the normal class.
pub fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: `param` outlives the call; gettid and setpriority take no pointers; on Linux a
    // thread id names one thread.
    unsafe {
        let tid = libc::gettid();
        let param = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(tid, libc::SCHED_IDLE, &param) != 0
            && libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19) != 0
        {
            tracing::debug!("a background thread keeps its priority");
        }
    }
}
