import Foundation
import Herald
import HeraldTesting
import Testing

/// `herald serve` downloading notification images (`fcm_options.image`) from an HTTPS server signed by a CA of the
/// operator's, named by `image-attachment-ca`.
@Suite("herald serve attaches notification images from a server its image-attachment-ca trusts")
struct ServeImageAttachmentTests {
    /// Posts a `mutable-content` notification whose image is `url`.
    static func sendImage(_ url: String, to daemon: DaemonProcess, token: String) throws {
        let body = """
            {"message": {"token": "\(token)", "notification": {"title": "Rain", "body": "at five", "image": "\(url)"},
             "apns": {"payload": {"aps": {"mutable-content": 1}}}}}
            """
        let answer = try httpRequest(port: daemon.httpPort, "POST", "/v1/projects/demo/messages:send", body: body)
        #expect(answer.status == 200, "\(answer.body)")
    }

    /// The sizes of the files in the attachments directory of the daemon whose data directory is `data`.
    static func attachmentSizes(_ data: String) -> [Int] {
        let directory = "\(data)/attachments"
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.compactMap { FileManager.default.contents(atPath: "\(directory)/\($0)")?.count }.sorted()
    }

    /// Whether the daemon whose data directory is `data` logged that an image was not attached.
    static func loggedNotAttached(_ data: String) -> Bool {
        ((try? String(contentsOfFile: "\(data)/stderr.log", encoding: .utf8)) ?? "").contains("notification image not attached")
    }

    @Test(
        "trusted through the setting: attached; larger than image-attachment-max-bytes, or without the setting: presented without it, logged"
    )
    func attachesWithTheOperatorsCA() async throws {
        try await withTemporaryDirectory { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let server = try await PythonHTTPServer.start(certificate: certificates.certificateFile, key: certificates.keyFile)
            defer { server.stop() }

            let daemon = try await DaemonProcess.start(
                directory: "\(directory)/trusting",
                arguments: ["--image-attachment-ca", certificates.caFile, "--image-attachment-max-bytes", "5000"])
            let (token, _) = try #require(await echoedToken(daemon), "\(daemon.log)")
            try Self.sendImage("\(server.baseURL)/bytes/4096", to: daemon, token: token)
            let trusting = daemon.directory
            #expect(await eventually { Self.attachmentSizes(trusting) == [4096] }, "\(daemon.log)")
            try Self.sendImage("\(server.baseURL)/bytes/8192", to: daemon, token: token)
            #expect(await eventually { Self.loggedNotAttached(trusting) }, "\(daemon.log)")
            #expect(Self.attachmentSizes(trusting) == [4096])
            #expect(await daemon.terminate() == 0, "\(daemon.log)")

            let untrusting = try await DaemonProcess.start(directory: "\(directory)/untrusting")
            let (other, _) = try #require(await echoedToken(untrusting), "\(untrusting.log)")
            try Self.sendImage("\(server.baseURL)/bytes/4096", to: untrusting, token: other)
            let data = untrusting.directory
            #expect(await eventually { Self.loggedNotAttached(data) }, "\(untrusting.log)")
            #expect(Self.attachmentSizes(data).isEmpty)
            #expect(await untrusting.terminate() == 0, "\(untrusting.log)")
        }
    }

    @Test("a bad image-attachment-max-bytes stops the start, naming the setting")
    func badMaximum() async throws {
        let zero = try await runHerald(["serve", "--image-attachment-max-bytes", "0"])
        #expect(zero.status == 64)
        #expect(zero.error.contains("flag --image-attachment-max-bytes: '0' is not valid"), "\(zero.error)")
    }
}
