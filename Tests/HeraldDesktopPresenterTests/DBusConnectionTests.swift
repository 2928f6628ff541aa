import Foundation
import HeraldDBus
import HeraldEventLoop
import HeraldTesting
import Testing

/// What happened on one connection, in order; touched on the loop thread only.
private final class Events: @unchecked Sendable {
    // @unchecked Sendable: `list` is read and written on the loop thread only (the test reads it through `submit`).
    var list: [String] = []
    var connection: DBusConnection?
}

@Suite("D-Bus connection")
struct DBusConnectionTests {
    @Test(
        "a connection lost with calls open: every open call fails and the loss is reported in the same turn of the loop, before anything it deferred runs"
    )
    func lossWithCallsOpen() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-dbus")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bus = PrivateSessionBus(directory: directory)
        try bus.start()
        defer { bus.stop() }
        let relay = try BusRelay(busAddress: bus.address, directory: directory)
        defer { relay.stop() }
        try await withRunningLoop { loop in
            let events = Events()
            // Connected and answered once before anything is held (so that Hello's answer is not among the held).
            let connected: Bool = await withCheckedContinuation { continuation in
                loop.execute {
                    guard let connection = try? DBusConnection(loop: loop, address: relay.address) else {
                        return continuation.resume(returning: false)
                    }
                    events.connection = connection
                    connection.onLost = { _ in events.list.append("lost") }
                    connection.call(
                        destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                        member: "ListNames", timeout: .seconds(60)
                    ) { result in
                        if case .success = result { continuation.resume(returning: true) } else { continuation.resume(returning: false) }
                    }
                }
            }
            #expect(connected)
            relay.hold(afterTheClientSends: "GetNameOwner")
            try await loop.submit {
                for name in ["org.example.First", "org.example.Second"] {
                    events.connection?.call(
                        destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                        member: "GetNameOwner", arguments: [.string(name)], timeout: .seconds(60)
                    ) { result in
                        guard case .failure(let error) = result else { return events.list.append("\(name) answered") }
                        events.list.append("\(name) failed: \(error.name)")
                        guard name == "org.example.First" else { return }
                        // The first thing the loop runs after this turn.
                        loop.scheduleTask(in: .zero) { events.list.append("next turn") }
                    }
                }
            }
            #expect(await eventually { relay.holds("NameHasNoOwner") })
            relay.stop()
            #expect(try await eventually { try await loop.submit { events.list.contains("next turn") } })
            let list = try await loop.submit { events.list }
            #expect(
                list == [
                    "org.example.First failed: org.freedesktop.DBus.Error.NoReply",
                    "org.example.Second failed: org.freedesktop.DBus.Error.NoReply",
                    "lost",
                    "next turn",
                ], "\(list)")
            try await loop.submit {
                events.connection?.close()
                events.connection = nil
            }
        }
    }
}
