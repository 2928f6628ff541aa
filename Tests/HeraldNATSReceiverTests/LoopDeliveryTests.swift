import CNATS
import Foundation
import HeraldEventLoop
import HeraldNATSReceiver
import HeraldTesting
import Testing

/// What the adapter delivered, as the loop saw it. Loop thread only, except through `snapshot`.
private final class LoopRecorder: @unchecked Sendable {
    // @unchecked Sendable: `received`, `offLoop` and `onMessage` are touched on the loop thread only.
    let loop: EventLoop
    var received: [String: [String]] = [:]
    var offLoop = 0
    /// Called on the loop for each message, after it was recorded.
    var onMessage: (_ subject: String, _ body: String) -> Void = { _, _ in }

    init(loop: EventLoop) { self.loop = loop }

    func take(_ message: OpaquePointer) {
        if !loop.inEventLoop { offLoop += 1 }
        let subject = String(cString: natsMsg_GetSubject(message))
        let length = Int(natsMsg_GetDataLength(message))
        let body = natsMsg_GetData(message).map { String(decoding: UnsafeRawBufferPointer(start: $0, count: length), as: UTF8.self) } ?? ""
        natsMsg_Destroy(message)
        received[subject, default: []].append(body)
        onMessage(subject, body)
    }

    func snapshot() async throws -> (received: [String: [String]], offLoop: Int) {
        try await loop.submit { (self.received, self.offLoop) }
    }
}

/// One connection run on a loop through Herald's adapter, with synchronous subscriptions. Loop thread only.
private final class LoopConnection: @unchecked Sendable {
    // @unchecked Sendable: every member is used on the loop thread only.
    let place: OpaquePointer
    let connection: OpaquePointer
    let recorder: LoopRecorder
    var subscriptions: [String: OpaquePointer] = [:]

    /// Connects on the loop thread.
    init(url: String, loop: EventLoop) throws {
        recorder = LoopRecorder(loop: loop)
        var options: OpaquePointer?
        try #require(natsOptions_Create(&options) == NATS_OK)
        defer { natsOptions_Destroy(options) }
        let status = url.withCString { url in
            var servers: [UnsafePointer<CChar>?] = [url]
            return natsOptions_SetServers(options, &servers, 1)
        }
        try #require(status == NATS_OK)
        place = try #require(herald_nats_loop_create(loop.uv))
        try #require(herald_nats_use_loop(options, place) == NATS_OK)
        var connection: OpaquePointer?
        try #require(natsConnection_Connect(&connection, options) == NATS_OK)
        self.connection = try #require(connection)
        herald_nats_loop_set_deliver(place) { message, closure in
            guard let message, let closure else { return }
            Unmanaged<LoopRecorder>.fromOpaque(closure).takeUnretainedValue().take(message)
        }
    }

    var closure: UnsafeMutableRawPointer { Unmanaged.passUnretained(recorder).toOpaque() }

    /// A synchronous subscription to `subject`, registered with the loop unless `register` is false.
    func subscribe(_ subject: String, register: Bool = true) throws {
        var subscription: OpaquePointer?
        try #require(natsConnection_SubscribeSync(&subscription, connection, subject) == NATS_OK)
        subscriptions[subject] = subscription
        if register { try #require(herald_nats_loop_add(place, subscription, closure)) }
    }

    func register(_ subject: String) throws {
        try #require(herald_nats_loop_add(place, subscriptions[subject], closure))
    }

    /// Unregisters and destroys the subscription to `subject`: true when it was registered.
    @discardableResult
    func close(_ subject: String) -> Bool {
        guard let subscription = subscriptions.removeValue(forKey: subject) else { return false }
        let registered = herald_nats_loop_remove(place, subscription) != nil
        natsSubscription_Unsubscribe(subscription)
        natsSubscription_Destroy(subscription)
        return registered
    }

    /// Waits until the server has taken this connection's subscriptions (its PONG is read by the loop: call off it).
    func flush() throws {
        try #require(natsConnection_FlushTimeout(connection, 10_000) == NATS_OK)
    }

    func closeAll() {
        for subject in Array(subscriptions.keys) { close(subject) }
        natsConnection_Close(connection)
        natsConnection_Destroy(connection)
    }
}

/// A nats-server, a publisher beside it, and a loop with a `LoopConnection` to the server for `body`; the
/// connection is closed and its adapter's handles gone before the loop ends.
private func withLoopConnection(
    named name: String, _ body: (EventLoop, LoopConnection, NATSPublisher) async throws -> Void
) async throws {
    let server = try NATSServerProcess(jetStream: false)
    defer { server.stop() }
    let publisher = try NATSPublisher(url: server.url)
    try await withEventLoop(named: name) { loop in
        let nats = try await loop.submit { try LoopConnection(url: server.url, loop: loop) }
        try await body(loop, nats, publisher)
        try await loop.submit { nats.closeAll() }
        #expect(try await eventually { try await loop.submit { herald_nats_open_adapter_handles(nats.place) == 0 } })
        try await loop.submit { herald_nats_loop_free(nats.place) }
    }
}

/// The NATS receiver's messages are taken on the loop thread right after each read of the connection (no cnats
/// delivery thread): the adapter's drain of synchronous subscriptions, against a real nats-server.
@Suite("NATS on the loop: synchronous subscriptions drained after each read")
struct LoopDeliveryTests {
    @Test(
        "every message of every registered subscription is delivered on the loop, in order; subscriptions added or removed during a drain, and one registered after its messages came, are handled"
    )
    func drainedOnTheLoop() async throws {
        try await withLoopConnection(named: "loop-delivery") { loop, nats, publisher in
            try await loop.submit {
                try nats.subscribe("a")
                try nats.subscribe("b")
                // Removed while a drain is going through the list; added while one is.
                nats.recorder.onMessage = { subject, body in
                    if subject == "b", body == "500" { #expect(nats.close("b")) }
                    if subject == "a", body == "1" { #expect(throws: Never.self) { try nats.subscribe("c") } }
                }
                // Messages that wait on a subscription before it is registered.
                try nats.subscribe("late", register: false)
            }
            try await loop.offload { try nats.flush() }
            for number in 1...1000 {
                try publisher.publish("a", "\(number)", flush: false)
                try publisher.publish("b", "\(number)", flush: false)
                try publisher.publish("late", "\(number)", flush: false)
            }
            try publisher.publish("a", "end", flush: true)
            #expect(
                try await eventually {
                    let (received, _) = try await nats.recorder.snapshot()
                    return received["a"]?.count == 1001
                })
            // Only now does "c" exist for the server: a flush from the loop's connection makes sure of it.
            try await loop.offload { try nats.flush() }
            for number in 1...10 { try publisher.publish("c", "\(number)", flush: false) }
            try publisher.publish("c", "end", flush: true)
            #expect(try await eventually { try await nats.recorder.snapshot().received["c"]?.count == 11 })

            // The late subscription's messages came in with the reads above and wait on it; registered, a forced
            // drain takes them all.
            try await loop.submit {
                #expect(nats.recorder.received["late"] == nil)
                try nats.register("late")
                herald_nats_loop_drain(nats.place, true)
            }
            let (received, offLoop) = try await nats.recorder.snapshot()
            #expect(offLoop == 0)
            #expect(received["a"] == (1...1000).map(String.init) + ["end"])
            #expect(received["b"] == (1...500).map(String.init))
            #expect(received["c"] == (1...10).map(String.init) + ["end"])
            #expect(received["late"] == (1...1000).map(String.init))

        }
    }

    @Test(
        "a subscription that overflowed its pending limit before a drain: the drain goes past cnats's slow-consumer report and takes what was kept"
    )
    func slowConsumer() async throws {
        try await withLoopConnection(named: "loop-delivery-slow") { loop, nats, publisher in
            try await loop.submit {
                try nats.subscribe("slow", register: false)
                #expect(natsSubscription_SetPendingLimits(nats.subscriptions["slow"], 5, 1 << 20) == NATS_OK)
                try nats.subscribe("marker")
            }
            try await loop.offload { try nats.flush() }
            for number in 1...20 { try publisher.publish("slow", "\(number)", flush: false) }
            try publisher.publish("marker", "end", flush: true)
            // The marker comes after the 20 on the same connection: once it is delivered, all 20 were read.
            #expect(try await eventually { try await nats.recorder.snapshot().received["marker"] == ["end"] })
            try await loop.submit {
                try nats.register("slow")
                herald_nats_loop_drain(nats.place, true)
            }
            let (received, offLoop) = try await nats.recorder.snapshot()
            #expect(offLoop == 0)
            #expect(received["slow"] == (1...5).map(String.init))

        }
    }

    @Test(
        "a message cnats made is freed on the calling thread: its second word is libnats's natsMsg_free, as herald_nats_message_free checks (otherwise it falls back to natsMsg_Destroy and cnats's collector thread)"
    )
    func messageFreedHere() throws {
        try #require(herald_nats_load() == 1, "\(String(cString: herald_nats_last_error(NATS_ERR)))")
        let free = try #require(herald_nats_message_free_function(), "this libnats exports no natsMsg_free")
        var created: OpaquePointer?
        try #require(natsMsg_Create(&created, "herald.check", nil, "body", 4) == NATS_OK)
        let message = try #require(created)
        let words = UnsafeRawPointer(message).assumingMemoryBound(to: UnsafeRawPointer?.self)
        #expect(
            words[1] == unsafeBitCast(free, to: UnsafeRawPointer.self),
            "libnats's message layout changed: messages go to its collector thread")
        herald_nats_message_free(message)
    }
}
