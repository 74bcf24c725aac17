#include "server/prep_pool.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace troupe::server {

constexpr int k_prep_nice_below = 10;

void enter_prep_thread() {
    thread_local bool entered = false;
    if (entered) return;
    entered = true;
    (void)::pthread_setname_np(::pthread_self(), "troupe-prep");
    // Ten nice levels below the thread that starts it (never above it: a server started at nice 15 would otherwise be
    // asked to raise its prep threads to 10). Where that passes the lowest nice, 19, SCHED_IDLE puts them below
    // every nice level instead (the server runs at nice 10 or more, say under `nice -n 19`).
    const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
    errno = 0;
    const int nice_now = ::getpriority(PRIO_PROCESS, tid);
    const int base = errno == 0 ? nice_now : 0;
    if (base + k_prep_nice_below <= 19) {
        (void)::setpriority(PRIO_PROCESS, tid, base + k_prep_nice_below);
    } else {
        const sched_param idle{};
        (void)::sched_setscheduler(0, SCHED_IDLE, &idle);  // 0: the calling thread
    }
}

}  // namespace troupe::server
