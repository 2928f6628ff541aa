import ArgumentParser
import Glibc
import Herald
import HeraldDaemon
import HeraldHTTPReceiver
import HeraldNATSReceiver
import HeraldSQLite

/// `herald senders add|list|revoke`: senders with credentials of their own, each with scopes and a rate limit, kept
/// in an instance's store (`--data-dir`) or, for a fleet's gateways, in a NATS key-value bucket (`--nats`).
struct Senders: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Add, list and revoke senders: credentials of their own, with scopes and a rate limit.",
        discussion: """
            A sender presents its secret as `Authorization: Bearer <secret>` to the HTTP endpoint (FCM v1, Instance ID, \
            APNs provider routes), beside the bearer secret of --auth-token-file, which keeps every scope and no limit. \
            Scopes: send (to tokens and installations), send-topics (to topics and conditions), manage-topics (topic \
            subscriptions); a request outside them gets 403 PERMISSION_DENIED naming the scope. Over its rate, a sender \
            gets 429 RESOURCE_EXHAUSTED (QUOTA_EXCEEDED) with Retry-After. The store keeps only the secret's SHA-256. \
            With --data-dir, the instance of that data directory takes the change within a few seconds, running or not; \
            with --nats, every gateway of the fleet (herald serve --gateway) does, the senders kept in the bucket \
            HERALD_<PROJECT>_SENDERS.
            """,
        subcommands: [Add.self, List.self, Revoke.self]
    )

    /// Where the senders are kept: an instance's store, or the fleet's bucket.
    struct Location: ParsableArguments {
        @Option(name: .customLong("data-dir"), help: "The instance's data directory (unless --nats).")
        var dataDirectory: String = "herald-data"

        @Option(
            name: .customLong("nats"),
            help: ArgumentHelp(
                "A NATS server of the fleet (repeat for a cluster): keep the senders there, for its gateways.", valueName: "url"))
        var natsServers: [String] = []

        @Option(
            name: .customLong("project-id"),
            help: "The fleet's project ID, naming its bucket with --nats (default: what the daemon of --data-dir says, else herald).")
        var projectID: String?

        func validate() throws {
            if natsServers.contains(where: \.isEmpty) { throw ValidationError("--nats: a NATS server URL") }
            if projectID?.isEmpty == true { throw ValidationError("--project-id: a non-empty project ID") }
        }

        /// The fleet's bucket and a connection to it, with `--nats`.
        func fleet() throws -> (publisher: NATSPublisher, bucket: String, replicas: Int)? {
            guard !natsServers.isEmpty else { return nil }
            let project = projectID ?? DataDirectoryLock.inspect(directory: dataDirectory).owner?.projectID ?? "herald"
            let options = NATSReceiver.Options(servers: natsServers)
            return (try NATSPublisher(options: options), NATSSubjects.sendersBucket(project: project), options.effectiveReplicas)
        }

        /// Every sender, revoked ones included.
        func senders() throws -> [SenderCredential] {
            if let fleet = try fleet() { return try fleet.publisher.senders(bucket: fleet.bucket) }
            return try storedSenders(directory: dataDirectory)
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make a sender: print its new secret once (or write it, mode 0600, to --out); only its hash is kept.")

        @Argument(help: "The sender's name: 1 to 64 of a-z, 0-9, '-' and '_'.")
        var name: String

        @Option(help: "What it may do, comma-separated: send, send-topics, manage-topics, or all.")
        var scopes: String

        @Option(help: "Requests per second it may make on average (default: no limit).")
        var rate: Double?

        @Option(help: "Requests it may make at once, after a pause (the bucket's size; default: the rate rounded up).")
        var burst: Int?

        @Option(name: .customLong("out"), help: "Write the secret to this new file (mode 0600) instead of printing it.")
        var output: String?

        @OptionGroup var location: Location

        func validate() throws {
            guard SenderCredential.isValidName(name) else { throw ValidationError("NAME: 1 to 64 of a-z, 0-9, '-' and '_'") }
            guard SenderScopes(parsing: scopes) != nil else {
                throw ValidationError("--scopes: a comma-separated list of send, send-topics, manage-topics (or all)")
            }
            if let rate, !SenderCredential.rates.contains(rate) {
                throw ValidationError("--rate: requests per second, from 0.001 to 1000000")
            }
            if let burst, !SenderCredential.bursts.contains(burst) { throw ValidationError("--burst: from 1 to 1000000") }
            if burst != nil, rate == nil { throw ValidationError("--burst needs --rate") }
        }

        func run() async throws {
            do {
                guard try !location.senders().contains(where: { $0.name == name }) else {
                    throw CommandFailure(message: "herald: there is a sender \(name) already (revoked ones keep their name)")
                }
                let secret = SenderCredential.newSecret()
                let sender = SenderCredential(
                    name: name, secretHash: SenderCredential.hash(secret: secret), scopes: SenderScopes(parsing: scopes) ?? [],
                    rate: rate, burst: burst, createdAt: Int64(time(nil)))
                if let output { try writeSecretFile(output, secret) }
                do {
                    if let fleet = try location.fleet() {
                        try fleet.publisher.putSender(sender, bucket: fleet.bucket, replicas: fleet.replicas)
                    } else {
                        try SQLiteStore(directory: location.dataDirectory).addSender(
                            StoredSender(
                                name: name, secretHash: sender.secretHash, scopes: sender.scopes.description, rate: rate, burst: burst,
                                createdAt: sender.createdAt))
                    }
                } catch {
                    if let output { unlink(output) }
                    throw error
                }
                if let output {
                    writeLine("wrote the secret of \(name) to \(output)")
                } else {
                    writeLine(secret)
                }
            } catch let failure as CommandFailure {
                throw failure
            } catch {
                throw CommandFailure(message: "herald: \(error)")
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Print the senders, one JSON object per line: name, scopes, rate, burst, createdAt, revokedAt (never the secret).")

        @OptionGroup var location: Location

        func run() async throws {
            do {
                for sender in try location.senders() {
                    var object: JSONObject = [
                        "name": .string(sender.name), "scopes": .array(sender.scopes.names.map { .string($0) }),
                        "createdAt": .int(sender.createdAt),
                    ]
                    object["rate"] = sender.rate.map { .double($0) } ?? .null
                    object["burst"] = sender.burst.map { .int(Int64($0)) } ?? .null
                    object["revokedAt"] = sender.revokedAt.map { .int($0) } ?? .null
                    writeLine(String(decoding: JSONValue.object(object).jsonBytes(), as: UTF8.self))
                }
            } catch {
                throw CommandFailure(message: "herald: \(error)")
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke a sender: its secret is refused within a few seconds (by every gateway, with --nats).")

        @Argument(help: "The sender's name.")
        var name: String

        @OptionGroup var location: Location

        func run() async throws {
            do {
                let now = Int64(time(nil))
                if let fleet = try location.fleet() {
                    guard
                        var sender = try fleet.publisher.senders(bucket: fleet.bucket).first(where: {
                            $0.name == name && $0.revokedAt == nil
                        })
                    else { throw CommandFailure(message: "herald: no valid sender \(name) in \(fleet.bucket)") }
                    sender.revokedAt = now
                    try fleet.publisher.putSender(sender, bucket: fleet.bucket, replicas: fleet.replicas)
                } else {
                    let directory = location.dataDirectory
                    guard try storedSenders(directory: directory).contains(where: { $0.name == name && $0.revokedAt == nil }),
                        try SQLiteStore(directory: directory).revokeSender(name, now: now)
                    else { throw CommandFailure(message: "herald: no valid sender \(name) in \(directory)") }
                }
                writeLine("revoked \(name)")
            } catch let failure as CommandFailure {
                throw failure
            } catch {
                throw CommandFailure(message: "herald: \(error)")
            }
        }
    }
}

/// Writes `secret` and a newline to a new file `path`, mode 0600 from its creation; refused when the file exists.
private func writeSecretFile(_ path: String, _ secret: String) throws {
    let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw CommandFailure(message: "herald: cannot create \(path): \(String(cString: strerror(errno)))") }
    let bytes = Array((secret + "\n").utf8)
    let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    close(fd)
    guard written == bytes.count else {
        unlink(path)
        throw CommandFailure(message: "herald: cannot write \(path)")
    }
}
