#include "server/prep_pool.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace troupe::server {

void enter_prep_thread() {
    thread_local bool entered = false;
    if (entered) return;
    entered = true;
    (void)::pthread_setname_np(::pthread_self(), "troupe-prep");
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
}

}  // namespace troupe::server
