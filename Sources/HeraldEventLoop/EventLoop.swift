package import CLibUV
import Glibc
import Synchronization

/// One libuv event loop (`uv_loop_t`) and the thread that runs it.
///
/// Run it on a thread of its own with ``start()`` or on the caller's thread with ``run()``; stop it from
/// any thread with ``shutdown()``. ``execute(_:)`` and the `scheduleTask` calls may be made from any
/// thread; socket and signal handles are created and used on the loop thread.
///
/// The loop is also a `SerialExecutor` and a `TaskExecutor` (see `EventLoop+Executor.swift`), so `async`
/// code can run on the loop thread with no hop.
///
/// Shutdown closes every handle with `uv_close`, frees each in its close callback, runs queued work,
/// drops pending timers, and runs the loop until `uv_loop_close` succeeds: afterwards no handle is
/// alive and no file descriptor of the loop's is open.
public final class EventLoop: EventLoopScheduler, @unchecked Sendable {
    // @unchecked Sendable: fields shared between threads are either immutable, atomics, or inside
    // `shared` (a lock); every other mutable field is touched on the loop thread only, which the
    // public entry points check with preconditionInEventLoop().

    /// Where the loop is in its life.
    public enum Lifecycle: Sendable, Equatable {
        /// Created; work submitted now runs once the loop starts.
        case idle
        /// Running its thread.
        case running
        /// Closing handles and running the last queued work; no new handles, timers are dropped.
        case closing
        /// Finished: `uv_loop_close` succeeded and all memory is freed. Work submitted now is dropped.
        case closed
    }

    package enum Work {
        case closure(@Sendable () -> Void)
        /// A job enqueued on the loop as a serial executor (an actor's): it runs isolated to the loop.
        case job(UnownedJob)
        /// A job of a task that prefers the loop as its task executor: it runs on the loop thread, not isolated.
        case taskJob(UnownedJob)
    }

    private struct Shared {
        var lifecycle: Lifecycle = .idle
        var queue: [Work] = []
        var wakePending = false
        var closeWaiters: [CheckedContinuation<Void, Never>] = []
    }

    /// A name for the loop's thread and for log lines.
    public let name: String

    private let shared = Locked(Shared())
    private let ownerThread = Atomic<UInt>(0)
    private let closedSignal = ConditionLock(false)
    private let blockingThreads: Int
    private let blockingQueueLimit: Int
    private let pool = Locked<(pool: BlockingPool?, closed: Bool)>((nil, false))

    private let counters = Counters()
    /// The loop's task executor for tasks that should run on the loop thread without being isolated to it; see
    /// ``LoopTaskExecutor``. Set once in `init`, only read afterwards.
    public private(set) var taskExecutor: LoopTaskExecutor!

    // Loop-thread state.
    private var uvLoop: UnsafeMutablePointer<uv_loop_t>?
    private var asyncHandle: UnsafeMutablePointer<uv_async_t>?
    /// Wakes the loop for work queued on the loop thread itself (``enqueue(_:)``): the queue is run at the start of the
    /// next turn, before the loop polls (which does not block while the handle is active), without the async handle's
    /// `eventfd` write and read.
    private var idleHandle: UnsafeMutablePointer<uv_idle_t>?
    private var timerHandle: UnsafeMutablePointer<uv_timer_t>?
    /// Runs just before the loop polls for I/O (and may block): writes the output gathered during this turn of the
    /// loop (``GatheredOutput``), so that answers to a burst of pipelined requests leave in one `write`.
    private var prepareHandle: UnsafeMutablePointer<uv_prepare_t>?
    private var flushList: [any GatheredOutput] = []
    private var spareFlushList: [any GatheredOutput] = []
    private var prepareStarted = false
    private var timers = TimerHeap()
    private var armedDeadline: Deadline?
    private var spareBatch: [Work] = []
    /// Where libuv reads into, and where a filter may decode into once it has taken what was read (loop thread).
    package private(set) var readBuffer = UnsafeMutableRawBufferPointer(start: nil, count: 0)
    private var loopIsClosing = false

    /// Creates a loop; nothing runs until ``start()`` or ``run()``.
    ///
    /// - Parameters:
    ///   - name: the name of the loop's thread (the kernel keeps 15 bytes of it).
    ///   - blockingThreads: threads of the pool behind ``offload(_:)``, started on first use.
    ///   - blockingQueueLimit: how many offloaded jobs may wait before more are refused.
    public init(name: String = "herald-loop", blockingThreads: Int = 4, blockingQueueLimit: Int = 10_000) {
        self.name = name
        self.blockingThreads = blockingThreads
        self.blockingQueueLimit = blockingQueueLimit
        self.spawn = { name, body throws(EventLoopError) in try SpawnedThread.spawn(name: name, body) }
        self.taskExecutor = LoopTaskExecutor(loop: self)
    }

    /// A loop whose thread ``start()`` makes with `spawn` (for tests: one that fails, as `pthread_create` can).
    package init(name: String, spawningWith spawn: @escaping Spawn) {
        self.name = name
        self.blockingThreads = 4
        self.blockingQueueLimit = 10_000
        self.spawn = spawn
        self.taskExecutor = LoopTaskExecutor(loop: self)
    }

    /// How the loop's thread is made.
    package typealias Spawn = @Sendable (_ name: String, _ body: @escaping @Sendable () -> Void) throws(EventLoopError) -> SpawnedThread
    private let spawn: Spawn

    deinit {
        pool.withLock { $0.pool }?.shutdown()
    }

    // MARK: Thread identity

    public var inEventLoop: Bool {
        ownerThread.load(ordering: .relaxed) == UInt(bitPattern: Int(bitPattern: UInt(pthread_self())))
    }

    public var now: Deadline { Deadline.now() }

    /// Where the loop is in its life. Callable from any thread.
    public var lifecycle: Lifecycle { shared.withLock { $0.lifecycle } }

    // MARK: Running

    /// Starts the loop on a thread of its own and returns at once. Throws ``EventLoopError/alreadyRunning``
    /// when the loop was started (or run) before.
    public func start() throws {
        // Detached: nobody has to join it; waitUntilClosed() and shutdownGracefully() wait for the close instead.
        try spawnClaimed().detach()
    }

    /// As ``start()``, on a thread the caller joins once the loop has closed (``withEventLoop(named:_:)``, the
    /// daemon): a process that exits must not run its libraries' exit handlers while the loop thread still ends.
    package func startJoinable() throws -> SpawnedThread {
        try spawnClaimed()
    }

    /// Claims the loop and makes the thread that runs it. When the thread cannot be made, the claim is given back (a
    /// later ``start()`` may try again, and ``shutdown()`` closes the loop by itself); or, when a ``shutdown()`` came
    /// meanwhile and left the close to the thread that had claimed the loop, the loop is closed here.
    private func spawnClaimed() throws(EventLoopError) -> SpawnedThread {
        try claimForRunning()
        do {
            return try spawn(name) { [self] in runClaimed() }
        } catch {
            // Under the lock shutdown() marks an idle loop closing in: it then either sees the claim given back and
            // closes the loop itself, or has already left the close to this claim.
            let closing: Bool = shared.withLock { shared in
                if shared.lifecycle == .closing { return true }
                claimed.store(false, ordering: .releasing)
                return false
            }
            if closing { runClaimedWithoutLibuv() }
            throw error
        }
    }

    /// Runs the loop on the calling thread until it has shut down (someone called ``shutdown()``).
    /// Throws ``EventLoopError/alreadyRunning`` when the loop was started (or run) before.
    public func run() throws {
        try claimForRunning()
        runClaimed()
    }

    private let claimed = Atomic<Bool>(false)

    private func claimForRunning() throws(EventLoopError) {
        guard claimed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else {
            throw .alreadyRunning
        }
    }

    private func runClaimed() {
        ownerThread.store(UInt(bitPattern: Int(bitPattern: UInt(pthread_self()))), ordering: .relaxed)
        // Writing to a socket whose peer has gone raises SIGPIPE, which would kill the process; libuv
        // reports EPIPE instead once the signal is ignored. Every libuv program has to do this.
        signal(SIGPIPE, SIG_IGN)
        openLibuv()
        let startNow: Bool = shared.withLock { shared in
            if shared.lifecycle == .idle { shared.lifecycle = .running }
            // Work submitted before the loop ran: wake up once for all of it.
            if !shared.queue.isEmpty, !shared.wakePending {
                shared.wakePending = true
                uv_async_send(asyncHandle)
            }
            return shared.lifecycle == .running
        }
        if !startNow { beginClosing() }
        uv_run(uvLoop, UV_RUN_DEFAULT)
        finishClosing()
    }

    private func openLibuv() {
        let loop = UnsafeMutablePointer<uv_loop_t>.allocate(capacity: 1)
        precondition(uv_loop_init(loop) == 0, "uv_loop_init failed")
        loop.pointee.data = Unmanaged.passUnretained(self).toOpaque()
        uvLoop = loop

        let async = UnsafeMutablePointer<uv_async_t>.allocate(capacity: 1)
        precondition(
            uv_async_init(
                loop, async,
                { handle in
                    EventLoop.from(handle!.pointee.loop).drainQueue()
                }) == 0, "uv_async_init failed")
        async.pointee.data = nil
        asyncHandle = async

        let timer = UnsafeMutablePointer<uv_timer_t>.allocate(capacity: 1)
        precondition(uv_timer_init(loop, timer) == 0, "uv_timer_init failed")
        timer.pointee.data = nil
        timerHandle = timer

        let prepare = UnsafeMutablePointer<uv_prepare_t>.allocate(capacity: 1)
        precondition(uv_prepare_init(loop, prepare) == 0, "uv_prepare_init failed")
        prepare.pointee.data = nil
        // Not counted as keeping the loop alive: it only runs while connections that do keep it alive wait
        // for a flush.
        uv_unref(herald_as_handle(prepare))
        prepareHandle = prepare

        let idle = UnsafeMutablePointer<uv_idle_t>.allocate(capacity: 1)
        precondition(uv_idle_init(loop, idle) == 0, "uv_idle_init failed")
        idle.pointee.data = nil
        idleHandle = idle

        readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
        counters.liveHandles.wrappingAdd(4, ordering: .relaxed)
    }

    static func from(_ loop: UnsafeMutablePointer<uv_loop_t>) -> EventLoop {
        Unmanaged<EventLoop>.fromOpaque(loop.pointee.data).takeUnretainedValue()
    }

    /// The libuv loop, for handles created on the loop thread (here and by plugins of this package that drive
    /// libuv handles of a C library, as NATSReceiver does with cnats's libuv adapter). Traps off the loop thread.
    package var uv: UnsafeMutablePointer<uv_loop_t> {
        assertInEventLoop()
        return uvLoop!
    }

    /// Throws ``EventLoopError/shutDown`` when the loop no longer accepts new handles. Loop thread only.
    func checkAcceptingHandles() throws(EventLoopError) {
        preconditionInEventLoop()
        if loopIsClosing { throw .shutDown }
    }

    // MARK: Work queue

    public func execute(_ task: @escaping @Sendable () -> Void) {
        _ = enqueue(.closure(task))
    }

    /// Queues work; `false` when the loop has closed and the work was dropped.
    @discardableResult
    package func enqueue(_ work: Work) -> Bool {
        shared.withLock { shared in
            switch shared.lifecycle {
            case .closed:
                counters.dropped.wrappingAdd(1, ordering: .relaxed)
                return false
            case .idle, .closing:
                shared.queue.append(work)
            case .running:
                shared.queue.append(work)
                if !shared.wakePending {
                    shared.wakePending = true
                    if inEventLoop {
                        // The loop thread queues for itself (a group commit at the end of this turn, a task's next
                        // job): the next turn runs the queue, before the gathered output is written and the loop
                        // polls (without waiting), with no eventfd write and read.
                        uv_idle_start(idleHandle) { handle in
                            uv_idle_stop(handle)
                            EventLoop.from(handle!.pointee.loop).drainQueue()
                        }
                    } else {
                        // Under the lock, so that the async handle cannot be closed between the check and the send.
                        uv_async_send(asyncHandle)
                    }
                }
            }
            return true
        }
    }

    /// Runs the work queued when the loop woke up; work queued meanwhile waits for the next wake-up,
    /// so that a busy queue cannot starve I/O.
    private func drainQueue() {
        // Move the spare buffer out (not copy it), so the one swapped into the queue is uniquely owned and
        // work queued during this drain appends to it without a copy-on-write allocation.
        var batch: [Work] = []
        swap(&batch, &spareBatch)
        shared.withLock { shared in
            swap(&shared.queue, &batch)
            shared.wakePending = false
        }
        counters.wakeUps.wrappingAdd(1, ordering: .relaxed)
        counters.tasksRun.wrappingAdd(batch.count, ordering: .relaxed)
        for work in batch { run(work) }
        batch.removeAll(keepingCapacity: true)
        spareBatch = batch
    }

    @inline(__always)
    private func run(_ work: Work) {
        switch work {
        case .closure(let body):
            body()
        case .job(let job):
            job.runSynchronously(isolatedTo: asUnownedSerialExecutor(), taskExecutor: asUnownedTaskExecutor())
        case .taskJob(let job):
            job.runSynchronously(on: taskExecutor.asUnownedTaskExecutor())
        }
    }

    /// Runs `body` on the loop and returns its result. Throws ``EventLoopError/shutDown`` when the loop has closed.
    /// Callable from any thread, including the loop's (then `body` runs after the work already queued).
    public func submit<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let accepted = enqueue(
                .closure {
                    continuation.resume(with: Result { try body() })
                })
            if !accepted { continuation.resume(throwing: EventLoopError.shutDown) }
        }
    }

    /// Runs `body` on the loop and waits until it calls the `done` it is given (once); returns at once when the loop
    /// has closed. Callable from any thread but the loop's.
    package func submit(waitingFor body: @escaping @Sendable (_ done: @escaping @Sendable () -> Void) -> Void) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumed = Locked(false)
            let done: @Sendable () -> Void = { if resumed.setFirst() { continuation.resume() } }
            if !enqueue(.closure { body(done) }) { done() }
        }
    }

    /// Whether the idle handle will run the queue at the next turn (work the loop queued for itself waits). Loop
    /// thread only; for tests.
    var drainsAtNextTurn: Bool {
        assertInEventLoop()
        return idleHandle.map { uv_is_active(herald_as_handle($0)) != 0 } ?? false
    }

    // MARK: Flushing writes before polling

    /// Asks for `output.writeGathered()` to run before the loop next polls for I/O (in the order asked); `false` when
    /// the loop is closing and the output must be written at once. Loop thread only.
    package func writeBeforePolling(_ output: any GatheredOutput) -> Bool {
        guard !loopIsClosing, let prepareHandle else { return false }
        flushList.append(output)
        guard !prepareStarted else { return true }
        prepareStarted = true
        uv_prepare_start(prepareHandle) { handle in
            EventLoop.from(handle!.pointee.loop).writeGatheredOutput()
        }
        return true
    }

    /// Writes every output gathered so far, now: before the loop polls, and before a step that must come after what
    /// was gathered (the durable inbox's commit, which must not remove a message whose log line is still held).
    /// Loop thread only.
    package func writeGatheredOutput() {
        assertInEventLoop()
        // A write's completion may write again (and ask for another flush): go on until none is left, since
        // the loop may block in its poll right after this.
        while !flushList.isEmpty {
            var batch = spareFlushList
            swap(&batch, &flushList)
            for output in batch { output.writeGathered() }
            batch.removeAll(keepingCapacity: true)
            spareFlushList = batch
        }
        guard prepareStarted else { return }
        prepareStarted = false
        uv_prepare_stop(prepareHandle)
    }

    // MARK: Timers

    @discardableResult
    public func scheduleTask(deadline: Deadline, _ task: @escaping @Sendable () -> Void) -> ScheduledTask {
        let scheduled = ScheduledTask(deadline: deadline, body: task)
        if inEventLoop {
            insertTimer(scheduled)
        } else {
            execute { [self] in insertTimer(scheduled) }
        }
        return scheduled
    }

    private func insertTimer(_ task: ScheduledTask) {
        guard !loopIsClosing else {
            task.cancel()  // dropped at shutdown, as every pending timer is: it never runs
            return
        }
        timers.compactIfMostlyCancelled()
        if timers.insert(task) { armTimer(for: task.deadline) }
    }

    /// Timers in the heap, cancelled ones included until the next compaction. Loop thread only; for tests.
    var pendingTimerCount: Int {
        preconditionInEventLoop()
        return timers.count
    }

    private func armTimer(for deadline: Deadline) {
        if let armed = armedDeadline, armed <= deadline { return }
        armedDeadline = deadline
        uv_update_time(uvLoop)
        let now = Deadline.now()
        let delayNanoseconds = deadline > now ? deadline.uptimeNanoseconds - now.uptimeNanoseconds : 0
        // libuv counts milliseconds; round up so that the callback never finds the task not yet due.
        let delayMilliseconds = (delayNanoseconds + 999_999) / 1_000_000
        uv_timer_start(
            timerHandle,
            { handle in
                EventLoop.from(handle!.pointee.loop).fireTimers()
            }, delayMilliseconds, 0)
    }

    private func fireTimers() {
        armedDeadline = nil
        let now = Deadline.now()
        while let task = timers.popDue(at: now) {
            if task.claim() { task.body() }
        }
        timers.compactIfMostlyCancelled()
        if let next = timers.first, !loopIsClosing { armTimer(for: next.deadline) }
    }

    // MARK: Blocking work

    /// The pool behind ``offload(_:)``, started on first use.
    public func blockingPool() throws -> BlockingPool {
        try pool.withLock { state in
            if let pool = state.pool { return pool }
            if state.closed { throw EventLoopError.shutDown }
            let created = try BlockingPool(threads: blockingThreads, queueLimit: blockingQueueLimit, name: "\(name)-blk")
            state.pool = created
            return created
        }
    }

    /// Runs blocking `work` on the loop's ``BlockingPool`` and returns its result to the awaiting task.
    /// Throws ``EventLoopError/poolExhausted(limit:)`` when the pool's queue is full and
    /// ``EventLoopError/shutDown`` when the loop shuts down before the work started. Callable from any context.
    public func offload<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        let pool = try blockingPool()
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            do {
                try pool.submit(
                    { continuation.resume(with: Result { try work() }) },
                    onCancel: { continuation.resume(throwing: EventLoopError.shutDown) })
            } catch {
                continuation.resume(throwing: error)
            }
        }
    }

    /// Runs blocking `work` on the loop's ``BlockingPool``, then `completion` with its result on the loop thread.
    /// When the pool refuses the work, `completion` runs on the loop with the error. If the loop has closed
    /// by the time the work is done, `completion` is dropped. Callable from any thread.
    public func offload<T: Sendable>(
        _ work: @escaping @Sendable () throws -> T,
        then completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        do {
            try blockingPool().submit(
                { [self] in
                    let result = Result { try work() }
                    execute { completion(result) }
                },
                onCancel: { [self] in
                    execute { completion(.failure(EventLoopError.shutDown)) }
                })
        } catch {
            execute { completion(.failure(error)) }
        }
    }

    // MARK: Shutdown

    private func closePool() {
        pool.withLock { state in
            state.closed = true
            return state.pool
        }?.shutdown()
    }

    /// Begins an orderly shutdown: every handle is closed (connections see their close callbacks),
    /// queued work runs, pending timers are dropped, and the loop stops. Returns at once; callable from
    /// any thread; idempotent. Use ``waitUntilClosed()`` or ``shutdownGracefully()`` to wait.
    public func shutdown() {
        let wasIdle: Bool = shared.withLock { shared in
            if shared.lifecycle == .idle {
                shared.lifecycle = .closing
                return true
            }
            return false
        }
        // A loop that never ran has nothing to close but its queue: run() would start straight into closing.
        if wasIdle {
            if !claimed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged {
                return  // run() is starting right now and will see `.closing`.
            }
            runClaimedWithoutLibuv()
            return
        }
        if inEventLoop {
            beginClosing()
        } else {
            execute { [self] in beginClosing() }
        }
    }

    /// Shuts the loop down and waits until it has closed. Callable from any task not running on this loop.
    public func shutdownGracefully() async {
        shutdown()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let closed: Bool = shared.withLock { shared in
                if shared.lifecycle == .closed { return true }
                shared.closeWaiters.append(continuation)
                return false
            }
            if closed { continuation.resume() }
        }
    }

    /// Blocks the calling thread until the loop has closed. Must not be called on the loop thread.
    public func waitUntilClosed() {
        precondition(!inEventLoop, "waitUntilClosed() on the loop thread would wait forever")
        closedSignal.wait(until: { $0 }, then: { _ in })
    }

    private func beginClosing() {
        assertInEventLoop()
        guard !loopIsClosing else { return }
        loopIsClosing = true
        shared.withLock { $0.lifecycle = .closing }
        for task in timers.removeAll() { task.cancel() }
        uv_timer_stop(timerHandle)
        armedDeadline = nil
        // Close our own handles, then every handle created on the loop (each owner frees itself in its close callback).
        uv_close(
            herald_as_handle(timerHandle),
            { handle in
                EventLoop.from(handle!.pointee.loop).counters.liveHandles.wrappingSubtract(1, ordering: .relaxed)
            })
        // What was gathered goes out first. Connections close below and flush what they gather as they do; nothing
        // asks for a flush after this.
        writeGatheredOutput()
        uv_close(
            herald_as_handle(prepareHandle),
            { handle in
                EventLoop.from(handle!.pointee.loop).counters.liveHandles.wrappingSubtract(1, ordering: .relaxed)
            })
        // No send can reach the async handle now, nor a start the idle handle: enqueue() wakes the loop only while the
        // lifecycle is `.running`. Work they would have run is run after uv_run returns (finishClosing).
        uv_close(
            herald_as_handle(asyncHandle),
            { handle in
                EventLoop.from(handle!.pointee.loop).counters.liveHandles.wrappingSubtract(1, ordering: .relaxed)
            })
        uv_close(
            herald_as_handle(idleHandle),
            { handle in
                EventLoop.from(handle!.pointee.loop).counters.liveHandles.wrappingSubtract(1, ordering: .relaxed)
            })
        uv_walk(
            uvLoop,
            { handle, _ in
                guard let handle, uv_is_closing(handle) == 0, let owner = handle.pointee.data else { return }
                Unmanaged<LoopHandle>.fromOpaque(owner).takeUnretainedValue().closeForShutdown()
            }, nil)
    }

    private func finishClosing() {
        // uv_run returned: every handle has been closed. Run the work that is left (it may queue more).
        while true {
            let more: Bool = shared.withLock { !$0.queue.isEmpty }
            if !more { break }
            drainQueue()
        }
        // Work queued from here on is dropped; ending here means no handle can be opened any more.
        var remaining: [Work] = []
        let waiters: [CheckedContinuation<Void, Never>] = shared.withLock { shared in
            shared.lifecycle = .closed
            swap(&remaining, &shared.queue)
            defer { shared.closeWaiters.removeAll() }
            return shared.closeWaiters
        }
        for work in remaining { run(work) }
        while uv_loop_close(uvLoop) == Int32(UV_EBUSY.rawValue) {
            uv_run(uvLoop, UV_RUN_NOWAIT)
        }
        uvLoop?.deallocate()
        asyncHandle?.deallocate()
        idleHandle?.deallocate()
        timerHandle?.deallocate()
        prepareHandle?.deallocate()
        readBuffer.deallocate()
        uvLoop = nil
        asyncHandle = nil
        idleHandle = nil
        timerHandle = nil
        prepareHandle = nil
        flushList = []
        spareFlushList = []
        readBuffer = UnsafeMutableRawBufferPointer(start: nil, count: 0)
        closePool()
        ownerThread.store(0, ordering: .relaxed)
        closedSignal.withLockBroadcasting { $0 = true }
        for waiter in waiters { waiter.resume() }
    }

    /// Shutdown of a loop that never ran: run what was queued on the calling thread as if it were the loop's.
    private func runClaimedWithoutLibuv() {
        ownerThread.store(UInt(bitPattern: Int(bitPattern: UInt(pthread_self()))), ordering: .relaxed)
        loopIsClosing = true
        while true {
            var batch: [Work] = []
            let waiters: [CheckedContinuation<Void, Never>]? = shared.withLock { shared in
                swap(&batch, &shared.queue)
                guard batch.isEmpty else { return nil }
                shared.lifecycle = .closed
                defer { shared.closeWaiters.removeAll() }
                return shared.closeWaiters
            }
            if let waiters {
                closePool()
                ownerThread.store(0, ordering: .relaxed)
                closedSignal.withLockBroadcasting { $0 = true }
                for waiter in waiters { waiter.resume() }
                return
            }
            for work in batch { run(work) }
        }
    }

    // MARK: Statistics

    final class Counters: Sendable {
        let wakeUps = Atomic<Int>(0)
        let tasksRun = Atomic<Int>(0)
        let dropped = Atomic<Int>(0)
        let liveHandles = Atomic<Int>(0)
    }

    /// Counters for tests, benchmarks and health checks. Callable from any thread.
    public struct Statistics: Sendable, Equatable {
        /// How often the loop woke up to run queued work (several `execute` calls coalesce into one).
        public var wakeUps: Int
        /// How many queued closures and jobs have run.
        public var tasksRun: Int
        /// How many were dropped because they were submitted after the loop closed.
        public var droppedAfterClose: Int
        /// libuv handles open now, the loop's own included; zero once the loop has closed.
        public var liveHandles: Int
    }

    /// A snapshot of the loop's counters. Callable from any thread.
    public var statistics: Statistics {
        Statistics(
            wakeUps: counters.wakeUps.load(ordering: .relaxed),
            tasksRun: counters.tasksRun.load(ordering: .relaxed),
            droppedAfterClose: counters.dropped.load(ordering: .relaxed),
            liveHandles: counters.liveHandles.load(ordering: .relaxed)
        )
    }

    func handleOpened() { counters.liveHandles.wrappingAdd(1, ordering: .relaxed) }
    func handleClosed() { counters.liveHandles.wrappingSubtract(1, ordering: .relaxed) }
}
