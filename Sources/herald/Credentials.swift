import ArgumentParser
import Glibc
import Herald
import HeraldDaemon
import HeraldHTTPReceiver
import HeraldSQLite
import HeraldTLS
import Logging

/// `herald credentials create|list|revoke|ca`: Google service-account files Herald issues, for Admin SDK app servers
/// that send through Herald unchanged (the FCM proxy), and the CA whose certificate they trust.
struct Credentials: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Issue, list and revoke the service-account files Admin SDK app servers send with; print the FCM proxy's CA.",
        discussion: """
            `create` writes a Google service-account JSON file (mode 0600) whose RSA key Herald generated; the store keeps \
            only its public key. An app server whose GOOGLE_APPLICATION_CREDENTIALS (or credentials.Certificate) names the \
            file gets access tokens from Herald's POST /token and sends through Herald. `revoke` stops a key: no new \
            token, and the tokens it got stop working within seconds. `create --scopes` limits what the key's access \
            tokens may do (send, send-topics, manage-topics; all by default), as `herald senders` does for a secret. \
            The daemon may be running.
            """,
        subcommands: [Create.self, List.self, Revoke.self, CertificateAuthority.self]
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Write a new service-account file (mode 0600) and keep its public key.")

        @Option(name: .customLong("data-dir"), help: "The instance's data directory.")
        var dataDirectory: String = "herald-data"

        @Option(name: .customLong("out"), help: "The file to write (refused when it exists).")
        var output: String

        @Option(help: "A name for the key (the account's name in client_email, and what list shows).")
        var name: String = "herald-sender"

        @Option(
            name: .customLong("project-id"),
            help: "The daemon's project ID (its project-id setting; default: what the running daemon's herald.lock says, else herald).")
        var projectID: String?

        @Option(help: "What its access tokens may do, comma-separated: send, send-topics, manage-topics, or all.")
        var scopes: String = "all"

        func validate() throws {
            guard SenderScopes(parsing: scopes) != nil else {
                throw ValidationError("--scopes: a comma-separated list of send, send-topics, manage-topics (or all)")
            }
            let allowed = Set("abcdefghijklmnopqrstuvwxyz0123456789-".utf8)
            guard !name.isEmpty, name.utf8.count <= 30, name.utf8.allSatisfy(allowed.contains) else {
                throw ValidationError("--name: 1 to 30 lower-case letters, digits and '-'")
            }
            if projectID?.isEmpty == true { throw ValidationError("--project-id: a non-empty project ID") }
        }

        func run() async throws {
            do {
                let projectID = self.projectID ?? DataDirectoryLock.inspect(directory: dataDirectory).owner?.projectID ?? "herald"
                let pair = try RSAKeyPair.generate(bits: 2048)
                let keyID = hex((0..<20).map { _ in UInt8.random(in: 0...255) })
                let clientID = String(
                    (0..<21).map { index in Character(String(index == 0 ? Int.random(in: 1...9) : Int.random(in: 0...9))) })
                let email = "\(name)@\(projectID).iam.gserviceaccount.com"
                let file: JSONValue = [
                    "type": "service_account", "project_id": .string(projectID), "private_key_id": .string(keyID),
                    "private_key": .string(pair.privateKeyPEM), "client_email": .string(email), "client_id": .string(clientID),
                    "auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": "https://oauth2.googleapis.com/token",
                    "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
                    "client_x509_cert_url": .string("https://www.googleapis.com/robot/v1/metadata/x509/\(percentEncodedEmail(email))"),
                    "universe_domain": "googleapis.com",
                ]
                let store = try SQLiteStore(directory: dataDirectory)
                try writeNewFile(output, file.jsonBytes(), mode: 0o600)
                do {
                    try store.addServiceAccountKey(
                        ServiceAccountKey(
                            keyID: keyID, name: name, clientEmail: email, publicKeyPEM: pair.publicKeyPEM, createdAt: Int64(time(nil)),
                            scopes: SenderScopes(parsing: scopes)?.description))
                } catch {
                    unlink(output)
                    throw error
                }
                writeLine(
                    "wrote \(output) (key \(keyID), \(email)); the daemon accepts it within seconds, at once for a new token request")
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
                "Print the keys issued, one JSON object per line: keyID, name, clientEmail, scopes, createdAt, revokedAt (seconds since 1970)."
        )

        @Option(name: .customLong("data-dir"), help: "The instance's data directory.")
        var dataDirectory: String = "herald-data"

        func run() async throws {
            do {
                for key in try SQLiteStore.serviceAccountKeys(directory: dataDirectory) {
                    var object: JSONObject = [
                        "keyID": .string(key.keyID), "name": .string(key.name), "clientEmail": .string(key.clientEmail),
                        "createdAt": .int(key.createdAt),
                        "scopes": .array(keyScopes(key.scopes).names.map { .string($0) }),
                    ]
                    object["revokedAt"] = key.revokedAt.map { .int($0) } ?? .null
                    writeLine(String(decoding: JSONValue.object(object).jsonBytes(), as: UTF8.self))
                }
            } catch {
                throw CommandFailure(message: "herald: \(error)")
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke keys by key ID or name: no new access tokens, and those issued stop working within seconds.")

        @Option(name: .customLong("data-dir"), help: "The instance's data directory.")
        var dataDirectory: String = "herald-data"

        @Argument(help: "The key ID (private_key_id) or name of the keys to revoke.")
        var key: String

        func run() async throws {
            do {
                _ = try SQLiteStore.serviceAccountKeys(directory: dataDirectory)  // a store that exists, or its error
                let revoked = try SQLiteStore(directory: dataDirectory).revokeServiceAccountKeys(key, now: Int64(time(nil)))
                guard !revoked.isEmpty else { throw CommandFailure(message: "herald: no valid key \(key) in \(dataDirectory)") }
                writeLine("revoked \(revoked.joined(separator: ", "))")
            } catch let failure as CommandFailure {
                throw failure
            } catch {
                throw CommandFailure(message: "herald: \(error)")
            }
        }
    }

    struct CertificateAuthority: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ca",
            abstract:
                "Print the path of the FCM proxy's CA certificate (PEM), creating the CA when there is none; app servers trust it.",
            discussion: """
                Beside it, server.pem and server-key.pem: a certificate the CA issued for fcm.googleapis.com, \
                iid.googleapis.com and oauth2.googleapis.com (made when missing), for serving those names without the \
                proxy (tls-cert and tls-key, the names resolving to Herald).
                """)

        @Option(name: .customLong("data-dir"), help: "The instance's data directory.")
        var dataDirectory: String = "herald-data"

        func run() async throws {
            do {
                let authority = try ServiceAccountCredentials.authority(directory: dataDirectory)
                if access(authority.serverCertificateFile, R_OK) != 0 || access(authority.serverKeyFile, R_OK) != 0 {
                    try authority.issueServerCertificate(names: ServiceAccountCredentials.proxyHosts)
                }
                writeLine(authority.certificateFile)
            } catch {
                throw CommandFailure(message: "herald: \(error)")
            }
        }
    }
}

private func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef".utf8)
    return String(decoding: bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0F)]] }, as: UTF8.self)
}

private func percentEncodedEmail(_ email: String) -> String {
    email.split(separator: "@", omittingEmptySubsequences: false).joined(separator: "%40")
}

/// Writes `bytes` to a new file `path` with `mode` from its creation; refused when the file exists.
private func writeNewFile(_ path: String, _ bytes: [UInt8], mode: mode_t) throws {
    let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
    guard fd >= 0 else { throw CommandFailure(message: "herald: cannot create \(path): \(String(cString: strerror(errno)))") }
    let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    let synced = fsync(fd) == 0
    close(fd)
    guard written == bytes.count, synced else {
        unlink(path)
        throw CommandFailure(message: "herald: cannot write \(path)")
    }
}
