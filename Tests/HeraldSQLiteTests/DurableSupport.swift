import Foundation
import Herald
import HeraldSQLite
import HeraldTesting
import Testing

/// A fresh temporary data directory, removed when the test is done with it.
func withDataDirectory(_ body: (String) async throws -> Void) async throws {
    try await withTemporaryDirectory(prefix: "herald-durable", body)
}

/// Records every message, response and token it is given; optionally holds messages until opened.
final class DurableRecorder: MessageHandler, NotificationHandler, TokenHandler, @unchecked Sendable {
    // @unchecked Sendable: state behind a lock.
    struct State {
        var messages: [RemoteMessage] = []
        var tokens: [String?] = []
        var holding = false
        var held: [CheckedContinuation<Void, Never>] = []
    }

    let state: Locked<State>

    init(holding: Bool = false) {
        state = Locked(State(holding: holding))
    }

    var messages: [RemoteMessage] { state.withLock { $0.messages } }
    var tokens: [String?] { state.withLock { $0.tokens } }

    func didReceive(_ message: RemoteMessage) async throws {
        state.withLock { $0.messages.append(message) }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let hold = state.withLock { state in
                if state.holding { state.held.append(continuation) }
                return state.holding
            }
            if !hold { continuation.resume() }
        }
    }

    func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
        state.withLock { $0.messages.append(message) }
        return [.list]
    }

    func didReceiveRegistrationToken(_ token: String?) async {
        state.withLock { $0.tokens.append(token) }
    }
}

/// Starts Herald on an SQLite store in `directory` with `plugins`, runs `body`, and shuts it down.
func withDurableHerald(
    directory: String,
    configuration: Herald.Configuration = .init(senderID: "1234567890"),
    shutdownGrace: Duration = .seconds(10),
    plugins: [any HeraldPlugin],
    _ body: (Herald) async throws -> Void
) async throws {
    var configuration = configuration
    configuration.shutdownGracePeriod = shutdownGrace
    try await withStarted(
        Herald(configuration: patientShutdown(configuration), store: try SQLiteStore(directory: directory)), plugins: plugins, body)
}

/// A data-only message to `token` with the given ID.
func dataMessage(id: String, token: String, collapseKey: String? = nil, expiration: Int64? = nil, payload: String = "x") -> RemoteMessage {
    RemoteMessage(
        userInfo: ["gcm.message_id": .string(id), "from": "1234567890", "payload": .string(payload)],
        target: .token(token), collapseKey: collapseKey, expiration: expiration
    )
}

extension Result {
    var failureValue: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
