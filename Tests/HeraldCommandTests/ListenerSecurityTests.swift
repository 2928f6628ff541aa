import Foundation
import Herald
import HeraldTesting
import Testing

/// The listeners' security review (README, "Security review of the listeners") as tests of `herald serve`.
@Suite("herald serve: listeners beyond loopback, and secrets kept out of logs", .serialized)
struct ListenerSecurityTests {
    @Test(
        "beyond loopback: HTTP without a secret, the socket over TCP and /metrics are refused at start; allow-unauthenticated-network lets the last two in"
    )
    func nonLoopbackBinds() async throws {
        try await withTemporaryDirectory(prefix: "herald-security") { directory in
            let cases: [(arguments: [String], says: String)] = [
                (["--http", "0.0.0.0:0", "--socket", "none"], "without a secret"),
                (["--http", "none", "--socket", "0.0.0.0:0"], "the socket receiver has no authentication"),
                (["--http", "none", "--socket", "none", "--metrics", "0.0.0.0:0"], "/metrics"),
                (["--http", "none", "--socket", "none", "--metrics", "0.0.0.0:0", "--allow-unauthenticated-network"], "without TLS"),
            ]
            for (arguments, says) in cases {
                let result = try await runHerald(["serve", "--data-dir", directory + "/data"] + arguments)
                #expect(result.status == 1, "\(arguments): \(result.output) \(result.error)")
                #expect(result.error.contains(says) && result.error.contains("0.0.0.0"), "\(arguments): \(result.error)")
            }
            // Allowed on purpose (and /metrics in plain HTTP), the socket receiver and /metrics start (HTTP still needs its
            // secret).
            let port = try freeLoopbackPort()
            let daemon = try await DaemonProcess.start(
                directory: directory + "/allowed", httpPort: port,
                arguments: [
                    "serve", "--data-dir", directory + "/allowed", "--echo", "--http", "127.0.0.1:\(port)", "--socket", "0.0.0.0:0",
                    "--metrics", "0.0.0.0:0", "--allow-unauthenticated-network", "--allow-plaintext-network",
                ])
            #expect(await echoedToken(daemon) != nil, "\(daemon.log)")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test(
        "beyond loopback: plain HTTP with a secret is refused at start without TLS; allow-plaintext-network serves it and says so in the log"
    )
    func plaintextHTTPBeyondLoopback() async throws {
        try await withTemporaryDirectory(prefix: "herald-security") { directory in
            let secretFile = directory + "/secret"
            try "s3cret\n".write(toFile: secretFile, atomically: true, encoding: .utf8)
            let refused = try await runHerald([
                "serve", "--data-dir", directory + "/refused", "--http", "0.0.0.0:0", "--socket", "none", "--auth-token-file", secretFile,
            ])
            #expect(refused.status == 1, "\(refused.output) \(refused.error)")
            #expect(refused.error.contains("refusing to serve plain HTTP on 0.0.0.0"), "\(refused.error)")

            let port = try freeLoopbackPort()
            let daemon = try await DaemonProcess.start(
                directory: directory + "/allowed", httpPort: port,
                arguments: [
                    "serve", "--data-dir", directory + "/allowed", "--echo", "--http", "0.0.0.0:\(port)", "--socket", "none",
                    "--auth-token-file", secretFile, "--allow-plaintext-network",
                ])
            #expect(await echoedToken(daemon) != nil, "\(daemon.log)")
            #expect(daemon.log.contains("serving plain HTTP beyond loopback, as allowed"), "\(daemon.log)")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test(
        "the bearer secret, the NATS token and a password in a NATS URL appear in no log line, error or printed configuration, even at trace level"
    )
    func secretsStayOutOfLogs() async throws {
        try await withTemporaryDirectory(prefix: "herald-security") { directory in
            let secret = "bearer-secret-4f1c9a"
            let environment = ["HERALD_AUTH_TOKEN": secret, "HERALD_LOG_LEVEL": "trace"]
            let daemon = try await DaemonProcess.start(directory: directory, arguments: ["--socket", "none"], environment: environment)
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            let body = #"{"message": {"token": "\#(token)", "data": {"a": "b"}}}"#
            let path = "/v1/projects/demo/messages:send"
            #expect(try httpRequest(port: daemon.httpPort, "POST", path, body: body).status == 401)
            #expect(try httpRequest(port: daemon.httpPort, "POST", path, body: body, secret: secret + "x").status == 401)
            #expect(try httpRequest(port: daemon.httpPort, "POST", path, body: body, secret: String(secret.dropLast())).status == 401)
            #expect(try httpRequest(port: daemon.httpPort, "POST", path, body: body, secret: secret).status == 200)
            #expect(await daemon.terminate() == 0)
            #expect(!daemon.log.contains(secret), "\(daemon.log)")
            let printed = try await runHerald(["serve", "--data-dir", directory, "--print-config"], environment: environment)
            #expect(printed.status == 0 && !printed.output.contains(secret) && !printed.error.contains(secret), "\(printed.output)")

            // NATS: a token file and a URL with a user and password, and no server there: the start fails, naming the
            // server without its password.
            let natsToken = "nats-token-77e2b1"
            let password = "url-password-a93d0c"
            let tokenFile = directory + "/nats.token"
            try natsToken.write(toFile: tokenFile, atomically: true, encoding: .utf8)
            let natsPort = try freeLoopbackPort()
            let failed = try await runHerald(
                [
                    "serve", "--data-dir", directory + "/nats", "--http", "none", "--socket", "none", "--log-level", "trace",
                    "--nats-server", "nats://alice:\(password)@127.0.0.1:\(natsPort)", "--nats-token-file", tokenFile,
                ])
            #expect(failed.status == 1)
            #expect(failed.error.contains("nats://***@127.0.0.1:\(natsPort)"), "\(failed.error)")
            for text in [failed.output, failed.error] {
                #expect(!text.contains(password) && !text.contains(natsToken), "\(text)")
            }
        }
    }
}
