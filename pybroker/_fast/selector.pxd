# C-level contract of pybroker._fast.selector: the worker loop's epoll selector, in C.

cdef extern from "<sys/epoll.h>" nogil:
    enum:
        EPOLLIN
        EPOLLOUT
    ctypedef union epoll_data_t:
        int fd
    struct epoll_event:
        unsigned int events
        epoll_data_t data
    int epoll_wait(int epfd, epoll_event *events, int maxevents, int timeout)


cdef enum:
    EVENTS_MAX = 128        # events one epoll_wait returns (the rest: the next poll's)
    ROUNDS_MAX = 64         # polls in one select before asyncio's turn runs anyway


cdef class _Poller:
    cdef readonly object loop
    cdef int _epfd
    cdef dict _fd_to_key        # the selector's own table (register / unregister change it)
    cdef object _ready          # the loop's ready queue (a deque)
    cdef epoll_event _events[EVENTS_MAX]

    # EpollSelector.select's answer, the C readers of the polls called (module docstring).
    cdef list select_c(self, object timeout)
    # One ready fd: its C reader called, or its key and events added to ready.
    cdef int _event(self, int fd, unsigned int happened, list ready, bint call) except -1
    # A reader handle's callback, as Handle._run calls it.
    cdef int _call(self, object handle) except -1
