import CNATS
import Glibc
import Herald

/// The sends of a ``NATSPublisher`` that are answered later, with no thread waiting for each (a gateway's):
///
/// - **stored** (``store(_:body:messageID:)``): a JetStream publish whose reply subject is this pipeline's prefix and
///   a number of its own; one subscription on `prefix.*` takes every acknowledgement and resumes the send its number
///   names. Many are in flight at once on the one connection, acknowledged as the server stores them.
/// - **flushed** (``flushed()``, after a core publish): answered once a flush (a PING whose PONG came back) that
///   started after the publish has completed: the server has the message. One thread of the pipeline's own runs one
///   flush at a time for every send waiting when it starts (those that come meanwhile share the next).
///
/// On a publisher whose connection runs on Herald's loop (a gateway's), the acknowledgements' subscription is
/// synchronous and registered with the loop's adapter: the loop takes each acknowledgement right after it reads it
/// and resumes its send there, with no thread of cnats's between the socket and the send. On a publisher with cnats's
/// own threads, a thread of cnats's for the subscription does.
///
/// Each send is resumed exactly once, from whichever thread settles it: its acknowledgement (the loop, or cnats's
/// thread for the subscription), its flush (the flusher's thread), its deadline (``NATSReceiver/Options/requestTimeout`` after the
/// publish; the flusher's thread checks every 100 ms), the connection lost (cnats's callback thread: a send in flight
/// is not known to be stored, so it fails, and its sender's retry, with the same `Nats-Msg-Id`, is stored once), or
/// ``close()``. An acknowledgement that comes after its send was settled otherwise finds nothing and is dropped.
final class NATSPipeline: @unchecked Sendable {
    // @unchecked Sendable: the mutable state is only touched with `mutex` held; `connection`, `prefix`, `place` and
    // `subscription` are set once by start(connection:place:) before any send, and read-only from then on until
    // unsubscribe() (the loop thread with a place, else the publisher's deinit).

    /// Where JetStream stored a message: the stream and its sequence there.
    struct Stored: Sendable, Equatable {
        let stream: String
        let sequence: UInt64
    }

    typealias Waiting = CheckedContinuation<Result<Stored, NATSReceiverError>, Never>
    typealias Flushing = CheckedContinuation<Result<Void, NATSReceiverError>, Never>

    private struct State {
        /// Stored sends waiting for their acknowledgement, by the number ending their reply subject.
        var acks: [UInt64: (waiting: Waiting, subject: String, deadline: UInt64)] = [:]
        /// The next number to give; every number below it has been given.
        var next: UInt64 = 1
        /// The sweep's cursor: no number below it waits (numbers are given in the order of their deadlines).
        var oldest: UInt64 = 1
        /// Core publishes waiting for a flush that has not started yet.
        var flushes: [Flushing] = []
        /// Bumped when the connection is lost: a flush that began before is not proof of a publish made before it.
        var epoch: UInt64 = 0
        var closed = false
        var flusherRunning = false
    }

    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var state = State()
    private let timeout: Duration
    private var connection: OpaquePointer?
    private var subscription: OpaquePointer?
    /// The adapter's place on the loop the connection runs on, when it does (the subscription is registered there).
    private var place: OpaquePointer?
    /// `_INBOX.<unique>.`: every acknowledgement's subject is this and a number.
    private var prefix = ""

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

    /// Subscribes to the acknowledgements on `connection` and starts the flusher. Once, before any send. With
    /// `place` (the connection runs on Herald's loop through the adapter), on the loop thread: the subscription is
    /// registered there and its acknowledgements are taken on the loop (``deliver``).
    func start(connection: OpaquePointer, place: OpaquePointer? = nil) throws {
        var inbox: UnsafeMutablePointer<natsInbox>?
        guard natsInbox_Create(&inbox) == NATS_OK, let inbox else {
            throw NATSReceiverError.subscribe(subject: "_INBOX", detail: String(cString: herald_nats_last_error(NATS_NO_MEMORY)))
        }
        prefix = String(cString: inbox) + "."
        natsInbox_Destroy(inbox)
        self.connection = connection
        let closure = Unmanaged.passRetained(self).toOpaque()
        if let place {
            try subscribeOnLoop(connection: connection, place: place, closure: closure)
        } else {
            try subscribeWithThread(connection: connection, closure: closure)
        }
        locked { $0.flusherRunning = true }
        let created = detachThread { [self] in runFlusher() }
        if created != 0 {
            locked { $0.flusherRunning = false }
            throw NATSReceiverError.subscribe(subject: prefix + "*", detail: "cannot start the flusher thread (\(created))")
        }
    }

    /// The adapter's delivery of an acknowledgement taken on the loop: `closure` is the pipeline its subscription
    /// was registered with.
    static let deliver: herald_nats_deliver_fn = { message, closure in
        guard let message, let closure else { return }
        Unmanaged<NATSPipeline>.fromOpaque(closure).takeUnretainedValue().acknowledged(message)
        natsMsg_Destroy(message)
    }

    /// A synchronous subscription registered with the loop's adapter (which holds `closure`, a reference to the
    /// pipeline, until ``unsubscribe()``).
    private func subscribeOnLoop(connection: OpaquePointer, place: OpaquePointer, closure: UnsafeMutableRawPointer) throws {
        var subscriptionPointer: OpaquePointer?
        let status = natsConnection_SubscribeSync(&subscriptionPointer, connection, prefix + "*")
        guard status == NATS_OK, let subscription = subscriptionPointer else {
            Unmanaged<NATSPipeline>.fromOpaque(closure).release()
            throw NATSReceiverError.subscribe(subject: prefix + "*", detail: String(cString: herald_nats_last_error(status)))
        }
        // Acknowledgements are never dropped for a slow consumer: each is a send's answer.
        natsSubscription_SetPendingLimits(subscription, -1, -1)
        guard herald_nats_loop_add(place, subscription, closure) else {
            natsSubscription_Unsubscribe(subscription)
            natsSubscription_Destroy(subscription)
            Unmanaged<NATSPipeline>.fromOpaque(closure).release()
            throw NATSReceiverError.subscribe(subject: prefix + "*", detail: "out of memory")
        }
        self.place = place
        self.subscription = subscription
    }

    /// An asynchronous subscription: cnats's thread for it takes the acknowledgements.
    private func subscribeWithThread(connection: OpaquePointer, closure: UnsafeMutableRawPointer) throws {
        var subscriptionPointer: OpaquePointer?
        let status = natsConnection_Subscribe(
            &subscriptionPointer, connection, prefix + "*",
            { _, _, message, closure in
                guard let message, let closure else { return }
                Unmanaged<NATSPipeline>.fromOpaque(closure).takeUnretainedValue().acknowledged(message)
                natsMsg_Destroy(message)
            }, closure)
        guard status == NATS_OK, let subscription = subscriptionPointer else {
            Unmanaged<NATSPipeline>.fromOpaque(closure).release()
            throw NATSReceiverError.subscribe(subject: prefix + "*", detail: String(cString: herald_nats_last_error(status)))
        }
        // Acknowledgements are never dropped for a slow consumer (each is a send's answer); the pipeline goes once
        // cnats is done with the subscription (no callback runs after that).
        natsSubscription_SetPendingLimits(subscription, -1, -1)
        natsSubscription_SetOnCompleteCB(
            subscription, { closure in closure.map { Unmanaged<NATSPipeline>.fromOpaque($0).release() } }, closure)
        self.subscription = subscription
    }

    // MARK: Stored sends

    /// Publishes `body` to `subject` through JetStream with `messageID` as its `Nats-Msg-Id`, and returns where the
    /// stream stored it once acknowledged; a failure (JetStream refused it, no answer in time, connection lost,
    /// closed) otherwise. Does not block.
    func store(_ subject: String, body: [UInt8], messageID: String) async -> Result<Stored, NATSReceiverError> {
        let deadline = Self.now() + UInt64(timeout.nanoseconds)
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

    /// An acknowledgement (or a no-responders answer), on the loop or cnats's thread for the subscription.
    private func acknowledged(_ message: OpaquePointer) {
        var number: UInt64 = 0
        var sequence: UInt64 = 0
        var code = jsErrCode(rawValue: 0)
        var stream = [CChar](repeating: 0, count: 256)
        var errorText = [CChar](repeating: 0, count: 256)
        let status = herald_nats_read_pub_ack(
            message, Int32(prefix.utf8.count), &number, &sequence, &stream, stream.count, &code, &errorText, errorText.count)
        if status == NATS_INVALID_SUBJECT { return }
        guard let entry = locked({ $0.acks.removeValue(forKey: number) }) else { return }
        if status == NATS_OK {
            entry.waiting.resume(returning: .success(Stored(stream: Self.string(stream), sequence: sequence)))
        } else {
            entry.waiting.resume(
                returning: .failure(
                    NATSReceiverError.jetStream(
                        operation: "store a message on \(entry.subject)", detail: Self.string(errorText), code: Int(code.rawValue))))
        }
    }

    // MARK: Flushed sends

    /// Returns once a flush that started after this call has completed: the server has every core publish made
    /// on this connection before the call. Does not block; one flush serves every send waiting when it starts.
    func flushed() async -> Result<Void, NATSReceiverError> {
        await withCheckedContinuation { (flushing: Flushing) in
            let queued = locked { state in
                guard !state.closed, state.flusherRunning else { return false }
                state.flushes.append(flushing)
                if state.flushes.count == 1 { pthread_cond_signal(condition) }
                return true
            }
            if !queued { flushing.resume(returning: .failure(.flush(detail: "the gateway is stopping"))) }
        }
    }

    /// The flusher's thread: flushes for the sends waiting, and answers stored sends whose deadline passed.
    private func runFlusher() {
        while true {
            let (batch, epoch, closed) = nextBatch()
            expire()
            if closed {
                for flushing in batch { flushing.resume(returning: .failure(.flush(detail: "the gateway is stopping"))) }
                locked { state in
                    state.flusherRunning = false
                    pthread_cond_broadcast(condition)
                }
                return
            }
            guard !batch.isEmpty, let connection else { continue }
            let status = natsConnection_FlushTimeout(connection, timeout.milliseconds)
            let lost = locked { $0.epoch != epoch }
            let result: Result<Void, NATSReceiverError> =
                if status != NATS_OK {
                    .failure(.flush(detail: String(cString: herald_nats_last_error(status))))
                } else if lost {
                    .failure(.flush(detail: "the connection was lost meanwhile"))
                } else {
                    .success(())
                }
            for flushing in batch { flushing.resume(returning: result) }
        }
    }

    /// The sends waiting for a flush (after waiting up to 100 ms for one), the connection's epoch, and whether closed.
    /// Not in a `locked` closure: its `inout` access to the state would let the compiler keep what it read before the
    /// wait, when other threads change the state during it.
    private func nextBatch() -> (batch: [Flushing], epoch: UInt64, closed: Bool) {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        if state.flushes.isEmpty && !state.closed {
            var wake = timespec()
            clock_gettime(CLOCK_MONOTONIC, &wake)
            wake.tv_nsec += 100_000_000
            if wake.tv_nsec >= 1_000_000_000 {
                wake.tv_sec += 1
                wake.tv_nsec -= 1_000_000_000
            }
            pthread_cond_timedwait(condition, mutex, &wake)
        }
        let batch = state.flushes
        state.flushes = []
        return (batch, state.epoch, state.closed)
    }

    // MARK: Settling what is in flight

    /// Fails the stored sends whose deadline has passed.
    func expire() {
        let now = Self.now()
        let expired = locked { state -> [(waiting: Waiting, subject: String, deadline: UInt64)] in
            var expired: [(waiting: Waiting, subject: String, deadline: UInt64)] = []
            while state.oldest < state.next {
                if let entry = state.acks[state.oldest] {
                    guard entry.deadline <= now else { break }
                    state.acks[state.oldest] = nil
                    expired.append(entry)
                }
                state.oldest += 1
            }
            return expired
        }
        for entry in expired {
            entry.waiting.resume(
                returning: .failure(Self.failure(entry.subject, "no acknowledgement within \(timeout) (the server is slow or away)")))
        }
    }

    /// The connection was lost (cnats's callback thread): what is in flight may or may not have reached the server,
    /// so it fails now (the sender retries) instead of at its deadline.
    func connectionLost() {
        settleAll(detail: "the connection to NATS was lost", closing: false)
    }

    /// Fails everything in flight and every later send; stops the flusher. Does not wait.
    func close() {
        settleAll(detail: "the gateway is stopping", closing: true)
    }

    /// Waits until the flusher's thread has ended (after ``close()``): before the connection is destroyed.
    func waitForFlusher() {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        state.closed = true
        pthread_cond_broadcast(condition)
        // The state read afresh after each wait (no `inout` access held across it: see nextBatch()).
        while state.flusherRunning { pthread_cond_wait(condition, mutex) }
    }

    /// Ends the subscription (before the connection is destroyed; the pipeline itself goes once cnats, or the loop's
    /// adapter, is done with it). With a place, on the loop thread. Once.
    func unsubscribe() {
        guard let subscription else { return }
        self.subscription = nil
        if let place, let closure = herald_nats_loop_remove(place, subscription) {
            Unmanaged<NATSPipeline>.fromOpaque(closure).release()
        }
        natsSubscription_Unsubscribe(subscription)
        natsSubscription_Destroy(subscription)
    }

    /// Sends waiting now: for an acknowledgement, or for a flush that has not started.
    var inFlight: Int { locked { $0.acks.count + $0.flushes.count } }

    private func settleAll(detail: String, closing: Bool) {
        let (acks, flushes) = locked { state in
            state.epoch += 1
            if closing {
                state.closed = true
                pthread_cond_broadcast(condition)
            }
            defer {
                state.acks = [:]
                state.oldest = state.next
                state.flushes = []
            }
            return (Array(state.acks.values), state.flushes)
        }
        for entry in acks { entry.waiting.resume(returning: .failure(Self.failure(entry.subject, detail))) }
        for flushing in flushes { flushing.resume(returning: .failure(.flush(detail: detail))) }
    }

    private static func failure(_ subject: String, _ detail: String) -> NATSReceiverError {
        .jetStream(operation: "store a message on \(subject)", detail: detail, code: 0)
    }

    private static func string(_ text: [CChar]) -> String {
        String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
