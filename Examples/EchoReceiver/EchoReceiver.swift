// EchoReceiver: the reference AppDelegate on Linux.
//
// With no arguments it starts a Herald instance, prints the registration token, subscribes to the topic
// "weather", feeds the bundled sample messages through the bus's way in for receivers (FCM v1 bodies and APNs
// payloads, handed over as the network receivers hand them), opens the first notification as a person would,
// prints everything the handlers see, and exits 0.
//
//     swift run EchoReceiver
//
// With `--listen PATH` it feeds nothing: it listens for FCM v1 send bodies, one JSON object per line, on the Unix
// socket PATH (the SocketReceiver plugin) until Ctrl-C, and prints what its handlers see. Try:
//
//     swift run EchoReceiver --listen herald-data/herald.sock
//     echo '{"message": {"token": "<the printed token>", "notification": {"title": "Hi", "body": "there"}}}' \
//         | nc -U -q1 herald-data/herald.sock

import Glibc
import Herald
import HeraldSocketReceiver

@main
struct EchoReceiver {
    static func main() async throws {
        let arguments = CommandLine.arguments
        let listenPath = arguments.firstIndex(of: "--listen").flatMap { arguments.indices.contains($0 + 1) ? arguments[$0 + 1] : nil }
        let herald = Herald(configuration: .init(senderID: "1234567890"))
        try herald.register(AppDelegate())
        if let listenPath {
            try herald.register(SocketReceiver(options: .init(addresses: [.unix(path: listenPath)])))
        }
        try herald.register(
            category: NotificationCategory(
                identifier: "MATCH_UPDATE",
                actions: [
                    NotificationAction(identifier: "FOLLOW", title: "Follow the match", options: .foreground)
                ]))
        try await herald.start()
        let token = try await herald.token()
        try await herald.subscribe(toTopic: "weather")
        if listenPath != nil {
            try await listenUntilInterrupted(herald)
            return
        }

        var firstNotification: String?
        for sample in Samples.all {
            print("\n--- \(sample.name)")
            switch await feed(sample, to: herald, token: token) {
            case .success(let id):
                print("accepted: projects/herald/messages/\(id)")
                try await herald.waitUntilIdle()
                if firstNotification == nil, sample.wire == .apns { firstNotification = id }
            case .failure(let error):
                print("refused: \(error)")
            }
        }

        if let firstNotification {
            print("\n--- the person opens the first notification")
            try await herald.respond(to: firstNotification)
        }
        await herald.shutdown()
    }

    /// Runs until SIGINT or SIGTERM, then shuts down cleanly (the socket file is removed).
    static func listenUntilInterrupted(_ herald: Herald) async throws {
        let loop = herald.loop
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            loop.execute {
                for signal in [SIGINT, SIGTERM] {
                    _ = try? SignalWatcher.watch(signal, on: loop) { _ in continuation.resume() }
                }
                // Flushed at once, also into a pipe: whoever started the program knows a signal now stops it cleanly.
                print("listening; SIGINT or SIGTERM stops")
                fflush(nil)
            }
        }
        print("shutting down")
        await herald.shutdown()
    }

    /// Submits a sample to the bus as its receiver would.
    static func feed(_ sample: Samples.Sample, to herald: Herald, token: String) async -> DeliveryOutcome {
        let body = sample.body.split(separator: "REPLACE_WITH_TOKEN", omittingEmptySubsequences: false).joined(separator: token)
        let context =
            switch sample.wire {
            case .fcm: SendContext()
            case .apns: SendContext(format: .apns(headers: [:], deviceToken: token))
            }
        guard let bus = try? herald.bus else { return .failure(MessageError(.shuttingDown)) }
        switch await bus.submit(Array(body.utf8), context) {
        case .accepted(let id): return .success(id)
        case .invalid(let error), .refused(let error): return .failure(error)
        }
    }
}
