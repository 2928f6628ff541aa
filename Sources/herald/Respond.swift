import ArgumentParser
import Herald
import HeraldDaemon

/// `herald respond`: a person's response to a notification a running daemon presented, through its socket
/// receiver's `respond` request — for daemons without a desktop, and for scripts.
struct Respond: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Answer a notification a running daemon presented, as a person would: open it, dismiss it, or take an action.",
        discussion: """
            The daemon's notification handlers get didReceive(response) and analytics records the open or dismissal, \
            as when the person acts on the desktop. Exits 0 when the daemon took the response, 1 when it answered with \
            an error (an unknown message or action, named in the answer).
            """
    )

    @Option(name: .customLong("data-dir"), help: "The daemon's data directory (its socket is herald.sock there).")
    var dataDirectory: String = "herald-data"

    @Option(help: ArgumentHelp("The daemon's socket receiver instead (a Unix socket path or HOST:PORT).", valueName: "path"))
    var socket: String?

    @Argument(help: "The message ID of the presented notification.")
    var messageID: String

    @Option(help: "default (opening it), dismiss, or one of its category's action identifiers.")
    var action: String = "default"

    @Option(help: "What the person typed, for a text-input action.")
    var text: String?

    func run() async throws {
        var request: JSONObject = ["message_id": .string(messageID), "action": .string(action)]
        if let text { request["text"] = .string(text) }
        let answer = try await socketRequest(["respond": .object(request)], socket: socket ?? "\(dataDirectory)/herald.sock")
        if (try? JSONParser.parse(answer))?["responded"] == nil { throw ExitCode(1) }
    }
}

/// Sends `request` as one line to a running daemon's socket receiver (a path or HOST:PORT), prints the one-line
/// answer, and returns it: what `herald respond` and `herald app-state` share.
func socketRequest(_ request: JSONObject, socket path: String) async throws -> [UInt8] {
    guard let address = SocketAddress(parsing: path.contains("/") || path.contains(":") ? path : "./\(path)") else {
        throw ValidationError("--socket must be a path or HOST:PORT, not '\(path)'")
    }
    var line = JSONValue.object(request).jsonBytes()
    line.append(UInt8(ascii: "\n"))
    let answer: [UInt8]
    do {
        answer = try await withEventLoop(named: "herald-socket-request") { loop in
            let reply = try await Exchange.run(line, with: address, on: loop) { $0.contains(UInt8(ascii: "\n")) }
            return Array(reply.prefix { $0 != UInt8(ascii: "\n") })
        }
    } catch {
        throw CommandFailure(message: "herald: \(error)")
    }
    print(String(decoding: answer, as: UTF8.self))
    return answer
}
