import CNATS
import Glibc
import Herald

/// The sends of a gateway's ``NATSPublisher`` that are answered later, with no thread waiting for each. Its
/// connection runs on Herald's loop, and one synchronous subscription on `prefix.*`, registered with the loop's
/// adapter, takes every answer the server sends back: the loop takes each right after the read that brought it and
/// resumes its send there, with no thread between the socket and the send.
///
/// - **stored** (``store(_:body:messageID:)``): a JetStream publish whose reply subject is the prefix and a number of
///   its own; its acknowledgement resumes the send the number names. Many are in flight at once on the one
///   connection, acknowledged as the server stores them.
/// - **flushed** (``flushed()``, after a core publish): answered once the server has the message. A marker, an
///   empty message to `prefix.f<n>` (which the subscription takes), is published after it: the server handles what
///   one connection sends in order, so once the marker comes back every publish made before it has reached the
///   server, as a flush's PONG would say, without a thread waiting for that PONG. One marker is in flight at a time,
///   for every send waiting when it was published (those that come meanwhile share the next).
///
/// Each send is resumed exactly once, by whatever settles it first: its acknowledgement or marker (the loop), its
/// deadline (``NATSReceiver/Options/requestTimeout`` after the publish; the sweeper's thread checks every 100 ms),
/// the connection lost (cnats's callback thread: a send in flight is not known to be stored, so it fails, and its
/// sender's retry, with the same `Nats-Msg-Id`, is stored once), or ``close()``. An answer that comes after its send
/// was settled otherwise finds nothing and is dropped (markers are numbered: one published before the connection
/// was lost and delivered after it came back settles nothing).
final class NATSPipeline: @unchecked Sendable {
    // @unchecked Sendable: the mutable state is only touched with `mutex` held; `connection`, `prefix`, `place` and
    // `subscription` are set once by start(connection:place:) (on the loop) before any send, and read-only from then
    // on until unsubscribe() (on the loop).

    /// Where JetStream stored a message: the stream and its sequence there.
    struct Stored: Sendable, Equatable {
        let stream: String
        let sequence: UInt64
    }

    typealias Waiting = CheckedContinuation<Result<Stored, NATSReceiverError>, Never>
    typealias Flushing = CheckedContinuation<Result<Void, NATSReceiverError>, Never>

    /// The marker in flight: its number, the sends it answers, and when the first of them times out (each send
    /// times out ``NATSReceiver/Options/requestTimeout`` after its publish, also one that waited for this marker).
    private struct Marker {
        let number: UInt64
        let flushes: [Flushing]
        let deadline: UInt64
    }

    private struct State {
        /// Stored sends waiting for their acknowledgement, by the number ending their reply subject.
        var acks: [UInt64: (waiting: Waiting, subject: String, deadline: UInt64)] = [:]
        /// The next number to give; every number below it has been given.
        var next: UInt64 = 1
        /// The sweep's cursor: no number below it waits (numbers are given in the order of their deadlines).
        var oldest: UInt64 = 1
        /// Core publishes waiting for the next marker (one is in flight), in their order, and when the first of them
        /// times out.
        var flushes: [Flushing] = []
        var firstDeadline: UInt64 = 0
        /// The marker in flight, if any.
        var marker: Marker?
        /// The last marker's number.
        var markers: UInt64 = 0
        var closed = false
        var sweeperRunning = false
    }

    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var state = State()
    private let timeout: Duration
    private var connection: OpaquePointer?
    private var subscription: OpaquePointer?
    /// The adapter's place on the loop the connection runs on (the subscription is registered there).
    private var place: OpaquePointer?
    /// `_INBOX.<unique>.`: every answer's subject is this and a number (an acknowledgement) or `f` and a number (a
    /// marker).
    private var prefix = ""
    private var prefixLength: Int32 = 0

    init(timeout: Duration) {
        self.timeout = timeout
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    private func locked<R>(_ body: (inout State) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }

    /// Subscribes to the answers on `connection`, which runs on the loop of the adapter's `place`, and starts the
    /// sweeper. On the loop thread; once, before any send.
    func start(connection: OpaquePointer, place: OpaquePointer) throws {
        var inbox: UnsafeMutablePointer<natsInbox>?
        guard natsInbox_Create(&inbox) == NATS_OK, let inbox else {
            throw NATSReceiverError.subscribe(subject: "_INBOX", detail: String(cString: herald_nats_last_error(NATS_NO_MEMORY)))
        }
        prefix = String(cString: inbox) + "."
        prefixLength = Int32(prefix.utf8.count)
        natsInbox_Destroy(inbox)
        self.connection = connection
        var subscriptionPointer: OpaquePointer?
        let status = natsConnection_SubscribeSync(&subscriptionPointer, connection, prefix + "*")
        guard status == NATS_OK, let subscription = subscriptionPointer else {
            throw NATSReceiverError.subscribe(subject: prefix + "*", detail: String(cString: herald_nats_last_error(status)))
        }
        // Answers are never dropped for a slow consumer: each is a send's.
        natsSubscription_SetPendingLimits(subscription, -1, -1)
        // The adapter holds a reference to the pipeline until unsubscribe().
        let closure = Unmanaged.passRetained(self).toOpaque()
        guard herald_nats_loop_add(place, subscription, closure) else {
            natsSubscription_Unsubscribe(subscription)
            natsSubscription_Destroy(subscription)
            Unmanaged<NATSPipeline>.fromOpaque(closure).release()
            throw NATSReceiverError.subscribe(subject: prefix + "*", detail: "out of memory")
        }
        self.place = place
        self.subscription = subscription
        locked { $0.sweeperRunning = true }
        let created = detachThread { [self] in runSweeper() }
        if created != 0 {
            locked { $0.sweeperRunning = false }
            throw NATSReceiverError.subscribe(subject: prefix + "*", detail: "cannot start the sweeper thread (\(created))")
        }
    }

    /// The adapter's delivery of an answer taken on the loop: `closure` is the pipeline its subscription was
    /// registered with.
    static let deliver: herald_nats_deliver_fn = { message, closure in
        guard let message, let closure else { return }
        Unmanaged<NATSPipeline>.fromOpaque(closure).takeUnretainedValue().answered(message)
        herald_nats_message_free(message)
    }

    // MARK: Stored sends

    /// Publishes `body` to `subject` through JetStream with `messageID` as its `Nats-Msg-Id`, and returns where the
    /// stream stored it once acknowledged; a failure (JetStream refused it, no answer in time, connection lost,
    /// closed) otherwise. Does not block.
    func store(_ subject: String, body: [UInt8], messageID: String) async -> Result<Stored, NATSReceiverError> {
        let deadline = deadline()
        return await withCheckedContinuation { (waiting: Waiting) in
            let number: UInt64? = locked { state in
                guard !state.closed, connection != nil else { return nil }
                let number = state.next
                state.next += 1
                state.acks[number] = (waiting, subject, deadline)
                return number
            }
            guard let number, let connection else {
                waiting.resume(returning: .failure(Self.failure(subject, "the publisher is closed (the gateway is stopping)")))
                return
            }
            let status = body.withUnsafeBytes {
                herald_nats_publish_message(connection, subject, prefix + String(number), $0.baseAddress, Int32($0.count), messageID)
            }
            guard status != NATS_OK else { return }
            // Not sent (or not known to be): settled here unless something settled it meanwhile.
            let detail = String(cString: herald_nats_last_error(status))
            if let entry = locked({ $0.acks.removeValue(forKey: number) }) {
                entry.waiting.resume(returning: .failure(Self.failure(subject, detail)))
            }
        }
    }

    /// An answer taken on the loop: a marker, or an acknowledgement (or a no-responders answer).
    private func answered(_ message: OpaquePointer) {
        if let subject = natsMsg_GetSubject(message), subject[Int(prefixLength)] == CChar(UInt8(ascii: "f")) {
            var number: UInt64 = 0
            var digit = subject + Int(prefixLength) + 1
            while digit.pointee >= 0x30 && digit.pointee <= 0x39 {
                number = number &* 10 &+ UInt64(digit.pointee - 0x30)
                digit += 1
            }
            marked(number)
            return
        }
        // The stream's name and an error's text are read into the stack, not into arrays allocated per answer.
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: 512) { buffer in
            let stream = buffer.baseAddress!
            let errorText = stream + 256
            var number: UInt64 = 0
            var sequence: UInt64 = 0
            var code = jsErrCode(rawValue: 0)
            let status = herald_nats_read_pub_ack(message, prefixLength, &number, &sequence, stream, 256, &code, errorText, 256)
            if status == NATS_INVALID_SUBJECT { return }
            guard let entry = locked({ $0.acks.removeValue(forKey: number) }) else { return }
            if status == NATS_OK {
                entry.waiting.resume(returning: .success(Stored(stream: String(cString: stream), sequence: sequence)))
            } else {
                entry.waiting.resume(
                    returning: .failure(
                        NATSReceiverError.jetStream(
                            operation: "store a message on \(entry.subject)", detail: String(cString: errorText),
                            code: Int(code.rawValue))))
            }
        }
    }

    // MARK: Flushed sends

    /// Returns once the server has every core publish made on this connection before the call (a marker published
    /// after them has come back). Does not block; one marker serves every send waiting when it is published.
    func flushed() async -> Result<Void, NATSReceiverError> {
        await withCheckedContinuation { (flushing: Flushing) in
            let outcome = locked { state -> (queued: Bool, marker: UInt64?) in
                guard !state.closed else { return (false, nil) }
                if state.flushes.isEmpty { state.firstDeadline = deadline() }
                state.flushes.append(flushing)
                return (true, state.marker == nil ? Self.nextMarker(&state) : nil)
            }
            guard outcome.queued else {
                flushing.resume(returning: .failure(.flush(detail: "the gateway is stopping")))
                return
            }
            if let number = outcome.marker { publishMarker(number) }
        }
    }

    /// Makes the sends waiting the next marker's (under the lock); its number.
    private static func nextMarker(_ state: inout State) -> UInt64 {
        state.markers += 1
        state.marker = Marker(number: state.markers, flushes: state.flushes, deadline: state.firstDeadline)
        state.flushes = []
        return state.markers
    }

    private func publishMarker(_ number: UInt64) {
        guard let connection else { return }
        let status = natsConnection_Publish(connection, prefix + "f" + String(number), nil, 0)
        guard status != NATS_OK else { return }
        settleMarker(number, .failure(.flush(detail: String(cString: herald_nats_last_error(status)))))
    }

    /// The marker `number` came back: the server has what was published before it.
    private func marked(_ number: UInt64) {
        settleMarker(number, .success(()))
    }

    /// Settles the sends of marker `number` with `result`, if it is still the one in flight, and publishes the next
    /// marker for the sends that came meanwhile.
    private func settleMarker(_ number: UInt64, _ result: Result<Void, NATSReceiverError>) {
        let (settled, next) = locked { state -> ([Flushing], UInt64?) in
            guard let marker = state.marker, marker.number == number else { return ([], nil) }
            state.marker = nil
            let next = state.flushes.isEmpty || state.closed ? nil : Self.nextMarker(&state)
            return (marker.flushes, next)
        }
        for flushing in settled { flushing.resume(returning: result) }
        if let next { publishMarker(next) }
    }

    // MARK: Settling what is in flight

    /// The sweeper's thread: every 100 ms, answers the sends whose deadline passed, until closed.
    private func runSweeper() {
        while waitForSweep() { expire() }
        locked { state in
            state.sweeperRunning = false
            pthread_cond_broadcast(condition)
        }
    }

    /// Waits 100 ms (or until closed); whether to sweep. Not in a `locked` closure: its `inout` access to the state
    /// would let the compiler keep what it read before the wait, when other threads change the state during it.
    private func waitForSweep() -> Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        if !state.closed {
            var wake = timespec()
            clock_gettime(CLOCK_MONOTONIC, &wake)
            wake.tv_nsec += 100_000_000
            if wake.tv_nsec >= 1_000_000_000 {
                wake.tv_sec += 1
                wake.tv_nsec -= 1_000_000_000
            }
            pthread_cond_timedwait(condition, mutex, &wake)
        }
        return !state.closed
    }

    /// Fails the stored sends, and the marker's, whose deadline has passed.
    func expire() {
        let now = Self.now()
        let (expired, marker) = locked { state -> ([(waiting: Waiting, subject: String, deadline: UInt64)], UInt64?) in
            var expired: [(waiting: Waiting, subject: String, deadline: UInt64)] = []
            while state.oldest < state.next {
                if let entry = state.acks[state.oldest] {
                    guard entry.deadline <= now else { break }
                    state.acks[state.oldest] = nil
                    expired.append(entry)
                }
                state.oldest += 1
            }
            return (expired, state.marker.flatMap { $0.deadline <= now ? $0.number : nil })
        }
        for entry in expired {
            entry.waiting.resume(
                returning: .failure(Self.failure(entry.subject, "no acknowledgement within \(timeout) (the server is slow or away)")))
        }
        if let marker {
            settleMarker(marker, .failure(.flush(detail: "the server did not answer within \(timeout) (it is slow or away)")))
        }
    }

    /// The connection was lost (cnats's callback thread): what is in flight may or may not have reached the server,
    /// so it fails now (the sender retries) instead of at its deadline.
    func connectionLost() {
        settleAll(detail: "the connection to NATS was lost", closing: false)
    }

    /// Fails everything in flight and every later send; stops the sweeper. Does not wait.
    func close() {
        settleAll(detail: "the gateway is stopping", closing: true)
    }

    /// Waits until the sweeper's thread has ended (after ``close()``): before the connection is destroyed.
    func waitForSweeper() {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        state.closed = true
        pthread_cond_broadcast(condition)
        // The state read afresh after each wait (no `inout` access held across it: see waitForSweep()).
        while state.sweeperRunning { pthread_cond_wait(condition, mutex) }
    }

    /// Ends the subscription (before the connection is closed; the pipeline itself goes once the adapter has let go
    /// of it). On the loop thread; once.
    func unsubscribe() {
        guard let subscription else { return }
        self.subscription = nil
        if let place, let closure = herald_nats_loop_remove(place, subscription) {
            Unmanaged<NATSPipeline>.fromOpaque(closure).release()
        }
        natsSubscription_Unsubscribe(subscription)
        natsSubscription_Destroy(subscription)
    }

    /// Sends waiting now: for an acknowledgement or a marker.
    var inFlight: Int { locked { $0.acks.count + $0.flushes.count + ($0.marker?.flushes.count ?? 0) } }

    private func settleAll(detail: String, closing: Bool) {
        let (acks, flushes) = locked { state in
            if closing {
                state.closed = true
                pthread_cond_broadcast(condition)
            }
            defer {
                state.acks = [:]
                state.oldest = state.next
                state.flushes = []
                state.marker = nil
            }
            return (Array(state.acks.values), (state.marker?.flushes ?? []) + state.flushes)
        }
        for entry in acks { entry.waiting.resume(returning: .failure(Self.failure(entry.subject, detail))) }
        for flushing in flushes { flushing.resume(returning: .failure(.flush(detail: detail))) }
    }

    /// When a send made now times out.
    private func deadline() -> UInt64 { Self.now() + UInt64(timeout.nanoseconds) }

    private static func failure(_ subject: String, _ detail: String) -> NATSReceiverError {
        .jetStream(operation: "store a message on \(subject)", detail: detail, code: 0)
    }

    private static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
