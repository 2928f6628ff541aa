import Foundation
import Herald
import HeraldTesting
import Testing

@testable import HeraldImageAttachment

/// The image modifier against Python's HTTPS server with a test CA: an image attached, and each way it is not.
@Suite("ImageAttachment: fcm_options.image downloaded and attached")
struct ImageAttachmentTests {
    /// What the presenter was given, and the analytics of the run.
    struct Outcome {
        var presented: RemoteMessage?
        var willPresent: RemoteMessage?
        var diagnostics: [AnalyticsEvent]
    }

    /// Sends one `mutable-content` notification whose image is `url` through a Herald with the modifier, and
    /// returns what reached the handler and the presenter.
    func present(
        image url: String, directory: String, certificates: TestCertificates, maximumBytes: Int = 10 * 1024 * 1024,
        deadline: Duration = .seconds(30), mutableContent: Bool = true
    ) async throws -> Outcome {
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.contentModifierDeadline = deadline
        let presenter = CapturingPresenter()
        let handler = CapturingHandler()
        let modifier = ImageAttachment(
            options: .init(directory: "\(directory)/attachments", maximumBytes: maximumBytes, caFile: certificates.caFile))
        var outcome = Outcome(diagnostics: [])
        try await withHerald(configuration: configuration, plugins: [modifier, handler, presenter]) {
            herald, receiver, sink in
            let token = try await herald.token()
            let body = """
                {"message": {"token": "\(token)", "notification": {"title": "Rain", "body": "at five", "image": "\(url)"},
                 "apns": {"payload": {"aps": {"mutable-content": \(mutableContent ? 1 : 0)}}}}}
                """
            _ = try await receiver.sendFCM(body, to: herald).get()
            try await herald.waitUntilIdle()
            outcome.presented = presenter.messages.last
            outcome.willPresent = handler.messages.last
            // Recorded after the modifiers' diagnostics, in the same order.
            _ = await eventually { !sink.events(named: .notificationForeground).isEmpty }
            outcome.diagnostics = sink.events(named: .diagnostic)
        }
        return outcome
    }

    @Test("an image from an HTTPS server with its own CA is written to the directory and attached before willPresent")
    func attached() async throws {
        try await withTemporaryDirectory(prefix: "herald-image") { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let server = try await PythonHTTPServer.start(certificate: certificates.certificateFile, key: certificates.keyFile)
            defer { server.stop() }
            let outcome = try await present(image: "\(server.baseURL)/bytes/4096", directory: directory, certificates: certificates)
            let attachment = try #require(outcome.presented?.attachments.first)
            #expect(attachment.path.hasPrefix("\(directory)/attachments/"))
            #expect(FileManager.default.contents(atPath: attachment.path)?.count == 4096)
            #expect(outcome.willPresent?.attachments == [attachment])
            #expect(outcome.presented?.aps.alert?.title == "Rain")
            #expect(outcome.diagnostics.isEmpty, "\(outcome.diagnostics)")
        }
    }

    @Test("without mutable-content the modifier is not called: nothing downloaded")
    func notMutable() async throws {
        try await withTemporaryDirectory(prefix: "herald-image") { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let server = try await PythonHTTPServer.start(certificate: certificates.certificateFile, key: certificates.keyFile)
            defer { server.stop() }
            let outcome = try await present(
                image: "\(server.baseURL)/bytes/16", directory: directory, certificates: certificates, mutableContent: false)
            #expect(outcome.presented?.attachments == [])
            #expect(!FileManager.default.fileExists(atPath: "\(directory)/attachments"))
        }
    }

    @Test(
        "an image not attached says why, in analytics (image_download_failed) and the log; the notification is presented without it",
        arguments: ["too large", "refused", "untrusted", "not https", "status"])
    func notAttached(_ situation: String) async throws {
        try await withTemporaryDirectory(prefix: "herald-image") { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let untrusted = situation == "untrusted"
            let server = try await PythonHTTPServer.start(
                certificate: untrusted ? certificates.untrustedCertificateFile : certificates.certificateFile,
                key: untrusted ? certificates.untrustedKeyFile : certificates.keyFile)
            defer { server.stop() }
            let (url, reason): (String, String) =
                switch situation {
                case "too large": ("\(server.baseURL)/bytes/5000", "longer than the limit of 1000 bytes")
                case "refused": ("https://localhost:\(try freeLoopbackPort())/image.png", "cannot connect")
                case "untrusted": ("\(server.baseURL)/bytes/16", "is not trusted")
                case "not https": ("http://127.0.0.1:\(server.port)/bytes/16", "is not an https URL")
                default: ("\(server.baseURL)/status/404", "answered status 404")
                }
            let outcome = try await present(image: url, directory: directory, certificates: certificates, maximumBytes: 1000)
            #expect(outcome.presented?.attachments == [])
            #expect(outcome.presented?.aps.alert?.body == "at five")
            let failure = try #require(outcome.diagnostics.first { $0.parameters["detail"] == "image_download_failed" })
            #expect(failure.parameters["url"] == url)
            #expect(failure.parameters["reason"]?.contains(reason) == true, "\(failure.parameters)")
            #expect(failure.messageID == outcome.presented?.messageID)
        }
    }

    @Test("at the deadline the download is abandoned and the notification presented without the image")
    func deadline() async throws {
        try await withTemporaryDirectory(prefix: "herald-image") { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let server = try await PythonHTTPServer.start(certificate: certificates.certificateFile, key: certificates.keyFile)
            defer { server.stop() }
            // /slow answers after 30 s; the deadline is 1 s.
            let outcome = try await present(
                image: "\(server.baseURL)/slow", directory: directory, certificates: certificates, deadline: .seconds(1))
            #expect(outcome.presented?.attachments == [])
            #expect(outcome.presented?.aps.alert?.title == "Rain")
            let details = outcome.diagnostics.compactMap { $0.parameters["detail"] }
            #expect(details.contains("content_modifier_deadline"), "\(outcome.diagnostics)")
            #expect(
                outcome.diagnostics.contains {
                    $0.parameters["detail"] == "image_download_failed" && $0.parameters["reason"] == "deadline"
                },
                "\(outcome.diagnostics)")
        }
    }

    @Test("file names from message IDs cannot leave the directory; extensions from the media type or the URL")
    func names() {
        #expect(ImageAttachment.fileName("../../etc/passwd") == "_._.._etc_passwd")
        #expect(ImageAttachment.fileName("0:1700000000%abc") == "0_1700000000_abc")
        #expect(ImageAttachment.fileExtension(type: "image/png", url: "https://x/y") == ".png")
        #expect(ImageAttachment.fileExtension(type: nil, url: "https://x/y.JPG?size=2") == ".jpg")
        #expect(ImageAttachment.fileExtension(type: "application/octet-stream", url: "https://x.org/y") == "")
    }
}

final class CapturingPresenter: Presenter {
    private let captured = Locked<[RemoteMessage]>([])
    var messages: [RemoteMessage] { captured.withLock { $0 } }
    func present(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) async {
        captured.withLock { $0.append(message) }
    }
}

final class CapturingHandler: NotificationHandler {
    private let captured = Locked<[RemoteMessage]>([])
    var messages: [RemoteMessage] { captured.withLock { $0 } }
    func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
        captured.withLock { $0.append(message) }
        return [.banner]
    }
}
