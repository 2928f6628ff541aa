import ArgumentParser
import Glibc
import Herald
import HeraldDaemon
import HeraldHTTPClient
import HeraldSQLite

/// `herald topics subscribe|unsubscribe|list`: the topics of the instance whose data directory is given, running or
/// stopped.
///
/// A running daemon keeps its topics in memory (and in its store): a change written to the store under it would not
/// reach it until its next start. So a change goes through the daemon when one runs (FCM's topic management routes
/// on its HTTP receiver, with the registration token read from the store), and into the store when none does. A
/// daemon counts as running when it holds the data directory's lock (`herald.lock`, see ``DataDirectoryLock``) or,
/// for daemons that take no such lock, when another process has the store open (SQLite's own lock on it). `list`
/// always reads the store, without changing it: a daemon writes a topic change there before it applies it.
struct Topics: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List, subscribe to or unsubscribe from topics of the instance whose data directory is given, running or stopped.",
        discussion: """
            A running daemon is changed through its HTTP receiver (FCM's topic management routes), so the change takes \
            effect at once; a stopped one's store is written, and the daemon has the topics at its next start. A daemon is \
            running when it holds DATA-DIR/herald.lock or has DATA-DIR/herald.sqlite open. A running daemon without an \
            HTTP receiver cannot be changed: stop it first. Topic names follow FCM's rule [a-zA-Z0-9-_.~%]{1,900}; a \
            /topics/ prefix is accepted. A name that starts with '-' goes after '--'.
            """,
        subcommands: [List.self, Subscribe.self, Unsubscribe.self]
    )

    /// `herald topics list`: one topic per line, sorted.
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the subscribed topics, one per line, sorted (the daemon may be running).")

        @Option(name: .customLong("data-dir"), help: "The instance's data directory.")
        var dataDirectory: String = "herald-data"

        func run() async throws {
            let snapshot: StoreSnapshot
            do {
                snapshot = try SQLiteStore.snapshot(directory: dataDirectory)
            } catch {
                throw CommandFailure(message: "herald: \(error)")
            }
            for topic in snapshot.topics { writeLine(topic) }
        }
    }

    struct Subscribe: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Subscribe the instance to a topic.")
        @OptionGroup var options: TopicChangeOptions
        @Argument(help: "The topic name.") var name: String

        func validate() throws { try options.validate(topic: name) }
        func run() async throws { try await options.change(topic: name, subscribe: true) }
    }

    struct Unsubscribe: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Unsubscribe the instance from a topic (not being subscribed is not an error).")
        @OptionGroup var options: TopicChangeOptions
        @Argument(help: "The topic name.") var name: String

        func validate() throws { try options.validate(topic: name) }
        func run() async throws { try await options.change(topic: name, subscribe: false) }
    }
}

/// The options of `herald topics subscribe` and `unsubscribe`, and the change itself.
struct TopicChangeOptions: ParsableArguments {
    @Option(name: .customLong("data-dir"), help: "The instance's data directory.")
    var dataDirectory: String = "herald-data"

    @Option(
        help: ArgumentHelp(
            "A running daemon's HTTP receiver, HOST:PORT or an http:// or https:// URL (default: what its herald.lock says, else 127.0.0.1:8080).",
            valueName: "host:port|url"))
    var http: String?

    @Option(
        name: .customLong("ca-file"),
        help: ArgumentHelp("A PEM file of the CAs that sign the daemon's certificate (https), instead of the system's.", valueName: "file"))
    var caFile: String?

    @Option(
        help: ArgumentHelp(
            "The proxy to send through (http://HOST:PORT, socks5h://HOST:PORT), instead of what https_proxy, http_proxy and no_proxy say.",
            valueName: "url"))
    var proxy: String?

    @Option(name: .customLong("project-id"), help: "The running daemon's project ID (default: what its herald.lock says, else herald).")
    var projectID: String?

    @Option(
        name: .customLong("auth-token-file"),
        help: ArgumentHelp("A file holding the running daemon's bearer secret (else HERALD_AUTH_TOKEN).", valueName: "file"))
    var authTokenFile: String?

    func validate(topic: String) throws {
        do {
            _ = try TopicName.validate(topic)
        } catch {
            throw ValidationError(
                "'\(topic)' is not a topic name: FCM topic names are 1 to \(TopicName.maximumLength) characters of a-z, A-Z, 0-9 and - _ . ~ % (a /topics/ prefix is accepted)"
            )
        }
        if let http, (try? HTTPURL(parsing: daemonURL(http))) == nil {
            throw ValidationError("--http must be HOST:PORT or an http:// or https:// URL, not '\(http)'")
        }
    }

    /// Subscribes or unsubscribes `topic` through the running daemon, or in the stopped daemon's store.
    func change(topic rawTopic: String, subscribe: Bool) async throws {
        let topic: String
        do {
            topic = try TopicName.validate(rawTopic)
        } catch {
            throw CommandFailure(message: "herald: \(error)")
        }
        do {
            switch DataDirectoryLock.inspect(directory: dataDirectory) {
            case .held(let owner):
                try await changeThroughDaemon(topic, subscribe: subscribe, owner: owner)
            case .free where storeStaysOpen():
                try await changeThroughDaemon(topic, subscribe: subscribe, owner: nil)
            case .free:
                try await changeInStore(topic, subscribe: subscribe)
            }
        } catch let failure as CommandFailure {
            throw failure
        } catch {
            throw CommandFailure(message: "herald: \(error)")
        }
    }

    /// Whether another process has the store open, and still has it a moment later: a daemon keeps it open while it
    /// runs, a tool such as `herald topics list` only for a few milliseconds.
    private func storeStaysOpen() -> Bool {
        guard SQLiteStore.isOpenInAnotherProcess(directory: dataDirectory) else { return false }
        usleep(100_000)
        return SQLiteStore.isOpenInAnotherProcess(directory: dataDirectory)
    }

    /// Writes the store of a stopped daemon, holding the data directory's lock shared so that a daemon that takes the
    /// lock cannot start in the middle. A daemon that takes no lock and opened the store before the write is seen
    /// afterwards (it still has the store open) and is told through HTTP too.
    private func changeInStore(_ topic: String, subscribe: Bool) async throws {
        try prepareDataDirectory(creating: subscribe)
        guard let hold = try DataDirectoryLock.shared(directory: dataDirectory) else {
            // A daemon took the lock since we looked: it runs now.
            return try await changeThroughDaemon(
                topic, subscribe: subscribe, owner: DataDirectoryLock.inspect(directory: dataDirectory).owner)
        }
        defer { hold.release() }
        let wasSubscribed = try subscribe ? false : SQLiteStore.snapshot(directory: dataDirectory).topics.contains(topic)
        do {
            // The store is closed again at the end of this block, before the check below.
            let store = try SQLiteStore(directory: dataDirectory)
            try store.setTopic(topic, subscribed: subscribe)
        }
        if storeStaysOpen() {
            // A daemon opened the store meanwhile and may have read its topics before the write: tell it too.
            return try await changeThroughDaemon(topic, subscribe: subscribe, owner: nil)
        }
        let outcome = subscribe ? "subscribed to \(topic)" : wasSubscribed ? "unsubscribed from \(topic)" : "was not subscribed to \(topic)"
        writeLine("\(outcome) (in the store of the stopped daemon in \(dataDirectory); it applies at the next start)")
    }

    /// Where the running daemon's HTTP receiver listens: `--http`, else what the daemon wrote in its lock, else the
    /// default address; and its base URL. `who` names the daemon in the errors.
    private func daemonEndpoint(owner: DataDirectoryLock.Owner?, who: String) throws -> (String, String) {
        let endpoint: String
        if let http {
            endpoint = http
        } else if let owner {
            guard let ownerHTTP = owner.http else {
                throw CommandFailure(
                    message: """
                        herald: \(who) has no HTTP receiver, and a running daemon's topics change only through it (writing its \
                        store would not reach it): stop the daemon, run this again and start it, or run it with --http
                        """)
            }
            endpoint = ownerHTTP
        } else {
            endpoint = "127.0.0.1:8080"
        }
        guard (try? HTTPURL(parsing: daemonURL(endpoint))) != nil else {
            throw CommandFailure(message: "herald: \(who) names its HTTP receiver '\(endpoint)', which is not HOST:PORT; give --http")
        }
        return (endpoint, daemonURL(endpoint))
    }

    /// Sends FCM's topic management request for this instance's token to the running daemon's HTTP receiver.
    private func changeThroughDaemon(_ topic: String, subscribe: Bool, owner: DataDirectoryLock.Owner?) async throws {
        let who =
            owner.map { "the daemon running in \(dataDirectory) (pid \($0.pid))" }
            ?? "a running daemon (another process has \(SQLiteStore.path(inDirectory: dataDirectory)) open)"
        let (endpoint, baseURL) = try daemonEndpoint(owner: owner, who: who)
        let project = projectID ?? owner?.projectID ?? "herald"
        let snapshot = try SQLiteStore.snapshot(directory: dataDirectory)
        guard let token = snapshot.identity?.token else {
            throw CommandFailure(
                message:
                    "herald: \(SQLiteStore.path(inDirectory: dataDirectory)) holds no registration token yet; try again once the daemon has started"
            )
        }
        let wasSubscribed = snapshot.topics.contains(topic)
        let secret = try BearerSecret.load(file: authTokenFile)

        let resource = "/v1/projects/\(percentEncoded(project))/registrations/\(percentEncoded(token))/topicSubscriptions"
        let target =
            subscribe ? "\(resource)?topic_name=\(percentEncoded(topic))" : "\(resource)/\(percentEncoded(topic))?allow_missing=true"
        let headers = secret.map { [(name: "Authorization", value: "Bearer \($0)")] } ?? []

        let response: HTTPResponse
        do {
            response = try await withEventLoop(named: "herald-topics") { loop in
                let client = HTTPClient(
                    loop: loop, configuration: .init(caFile: caFile, userAgent: "herald-topics/\(HeraldBuild.version)", proxy: proxy))
                return try await client.request(subscribe ? "POST" : "DELETE", baseURL + target, headers: headers)
            }
        } catch HTTPClientError.connectFailed {
            let hint =
                http == nil && owner == nil
                ? "give --http HOST:PORT (and --project-id) of that daemon, or stop it first"
                : "is the address right? Or stop the daemon first"
            throw CommandFailure(
                message: """
                    herald: \(who) keeps its topics in memory, so the change must go through its HTTP receiver, but nothing \
                    answers at \(endpoint) (connection refused): \(hint)
                    """)
        }
        let status = response.status
        let body = response.body
        guard status == 200 else {
            let detail = (try? JSONParser.parse(body))?["error"]?["message"]?.stringValue ?? String(decoding: body, as: UTF8.self)
            let hint = status == 401 ? " (give the daemon's bearer secret with --auth-token-file or HERALD_AUTH_TOKEN)" : ""
            throw CommandFailure(
                message:
                    "herald: the daemon at \(endpoint) refused the change with HTTP \(status): \(detail)\(hint)")
        }
        let outcome = subscribe ? "subscribed to \(topic)" : wasSubscribed ? "unsubscribed from \(topic)" : "was not subscribed to \(topic)"
        writeLine("\(outcome) (through the running daemon at \(endpoint))")
    }

}

extension DataDirectoryLock.State {
    var owner: DataDirectoryLock.Owner? {
        if case .held(let owner) = self { return owner }
        return nil
    }
}

extension TopicChangeOptions {
    /// Makes sure the data directory is there for a change in the store: subscribing an instance that never ran
    /// creates it (mode 0700, as the store does), unsubscribing one is a mistyped directory.
    func prepareDataDirectory(creating: Bool) throws {
        var info = stat()
        if stat(SQLiteStore.path(inDirectory: dataDirectory), &info) == 0 { return }
        guard creating else {
            let error = StoreError.cannotOpen(
                path: SQLiteStore.path(inDirectory: dataDirectory),
                detail: "there is no Herald store here (herald serve creates one in its data directory)")
            throw CommandFailure(message: "herald: \(error)")
        }
        var path = dataDirectory.hasPrefix("/") ? "/" : ""
        for component in dataDirectory.split(separator: "/") {
            path += (path.isEmpty || path.hasSuffix("/") ? "" : "/") + component
            if mkdir(path, 0o700) != 0, errno != EEXIST {
                throw CommandFailure(message: "herald: cannot create the data directory \(path): \(String(cString: strerror(errno)))")
            }
        }
    }
}

/// `text` with every byte but the URL-unreserved ones (`A-Z a-z 0-9 - _ . ~`) percent-encoded, for a path segment or
/// a query value.
func percentEncoded(_ text: String) -> String {
    var encoded = ""
    for byte in text.utf8 {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
            encoded.append(Character(UnicodeScalar(byte)))
        default:
            let digits = Array("0123456789ABCDEF")
            encoded += "%\(digits[Int(byte >> 4)])\(digits[Int(byte & 0xF)])"
        }
    }
    return encoded
}
