import Foundation
import HeraldTesting
import Testing

/// The checkout this test file is in (scripts/, packaging/).
private let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// The shipped unit with `ExecStart` pointing at the built `herald`, in `directory`.
private func unitForBuiltHerald(in directory: String) throws -> String {
    let unit = try String(contentsOf: repository.appendingPathComponent("packaging/systemd/herald.service"), encoding: .utf8)
    let path = "\(directory)/herald.service"
    try unit.replacingOccurrences(of: "ExecStart=/usr/bin/herald", with: "ExecStart=\(heraldExecutable.path)")
        .write(toFile: path, atomically: true, encoding: .utf8)
    return path
}

private let systemdAnalyze = URL(fileURLWithPath: "/usr/bin/systemd-analyze")

@Suite("The shipped systemd unit and the Debian package")
struct PackagingTests {
    @Test("systemd-analyze verify accepts the unit and its socket unit")
    func verify() async throws {
        try await withTemporaryDirectory { directory in
            let unit = try unitForBuiltHerald(in: directory)
            let result = try await runExecutable(systemdAnalyze, ["verify", "--man=no", unit])
            #expect(result.status == 0, "\(result.error)")
            let socket = "\(directory)/herald.socket"
            try FileManager.default.copyItem(
                atPath: repository.appendingPathComponent("packaging/systemd/herald.socket").path, toPath: socket)
            let socketResult = try await runExecutable(systemdAnalyze, ["verify", "--man=no", socket])
            #expect(socketResult.status == 0, "\(socketResult.error)")
        }
    }

    @Test("the socket unit listens where the shipped configuration's HTTP listener does")
    func socketMatchesConfiguration() throws {
        let socket = try String(contentsOf: repository.appendingPathComponent("packaging/systemd/herald.socket"), encoding: .utf8)
        let configuration = try String(contentsOf: repository.appendingPathComponent("packaging/herald.yaml"), encoding: .utf8)
        let listen = socket.split(separator: "\n").first { $0.hasPrefix("ListenStream=") }?.dropFirst("ListenStream=".count)
        // In the HTTPReceiver section, indented.
        let http = configuration.split(separator: "\n").map { $0.drop { $0 == " " } }.first { $0.hasPrefix("http:") }?.dropFirst(
            "http:".count)
        #expect(listen.map(String.init) == http.map { String($0).trimmingCharacters(in: .whitespaces) })
    }

    @Test("systemd-analyze security rates the unit OK or better (exposure below 2.0)")
    func security() async throws {
        let unit = repository.appendingPathComponent("packaging/systemd/herald.service").path
        let result = try await runExecutable(systemdAnalyze, ["security", "--offline=true", "--no-pager", unit])
        let line = result.output.split(separator: "\n").first { $0.contains("Overall exposure level") } ?? ""
        let level = line.split(separator: ":").last?.split(separator: " ").first.flatMap { Double($0) }
        #expect(level != nil, "\(result.output)\(result.error)")
        #expect((level ?? 10) < 2.0, "\(line)")
        // systemd-analyze's own threshold (exposure × 10) agrees: above it the command fails.
        let strict = try await runExecutable(systemdAnalyze, ["security", "--offline=true", "--threshold=19", unit])
        #expect(strict.status == 0, "\(strict.output)")
    }

    @Test("herald --version is the release version at its tag, else the version with the commit's date and hash")
    func versionNamesCommit() async throws {
        let git = URL(fileURLWithPath: "/usr/bin/git")
        func ask(_ arguments: [String]) async throws -> String {
            try await runExecutable(git, ["-C", repository.path, "-c", "safe.directory=\(repository.path)"] + arguments).output
                .trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let commit = try await ask(["rev-parse", "--short=7", "HEAD"])
        try #require(!commit.isEmpty, "not a git checkout: the build knows no commit")
        let date = try await ask(["log", "-1", "--format=%cd", "--date=format:%Y%m%d"])
        let tags = try await ask(["tag", "--points-at", "HEAD", "--list", "v[0-9]*"]).split(separator: "\n").map(String.init)
        let printed = try await runExecutable(heraldExecutable, ["--version"]).output.trimmingCharacters(in: .whitespacesAndNewlines)
        let release = String(printed.prefix { $0 != "~" })
        #expect(release.split(separator: ".").count == 3 && release.allSatisfy { $0.isNumber || $0 == "." }, "\(printed)")
        if tags.contains("v\(release)") {
            #expect(printed == release)
        } else {
            #expect(printed == "\(release)~git\(date).\(commit)")
        }
    }

    @Test(
        "scripts/package-deb builds a .deb that, extracted, holds the files and starts with the shipped configuration",
        .disabled(
            if: runningUnderThreadSanitizer || runningUnderAddressSanitizer,
            "packaging is shell and dpkg work a sanitizer has nothing to find in; it costs a minute of the sanitizer runs"),
        .timeLimit(.minutes(5)))
    func debianPackage() async throws {
        try await withTemporaryDirectory { directory in
            // The binary to install (the command tests' second run, TEST_HERALD_BINARY) is packaged as a release is;
            // the debug build beside the tests uncompressed (xz would spend half a minute of CPU on it for nothing).
            let installable = ProcessInfo.processInfo.environment["TEST_HERALD_BINARY"] != nil
            // Packaging takes a while: on a thread of its own, not one of the cooperative pool's few.
            let built = try await onOwnThread {
                try runExecutable(
                    repository.appendingPathComponent("scripts/package-deb"), ["\(directory)/out"],
                    environment: ["HERALD_BINARY": heraldExecutable.path, "HERALD_DEB_COMPRESSION": installable ? "xz" : "none"])
            }
            #expect(built.status == 0, "\(built.error)")
            let deb = built.output.split(separator: "\n").last.map(String.init) ?? ""
            #expect(deb.hasSuffix(".deb") && deb.contains("/herald_"), "\(built.output)")
            // The package's version is the binary's.
            let printed = try await runExecutable(heraldExecutable, ["--version"]).output.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(deb.contains("/herald_\(printed)_"), "\(deb) is not version \(printed)")
            // lintian: no error or warning beyond those the package overrides, each with its reason
            // (packaging/debian/lintian-overrides). Only for the binary to install (the command tests' second run,
            // TEST_HERALD_BINARY): the debug build beside the tests finds the Swift runtime by a RUNPATH into the
            // toolchain, which lintian rightly refuses in a package.
            if installable {
                let lintian = try await onOwnThread {
                    try runExecutable(URL(fileURLWithPath: "/usr/bin/lintian"), ["--fail-on", "error,warning", deb])
                }
                #expect(lintian.status == 0, "\(lintian.output)\(lintian.error)")
            }
            let root = "\(directory)/root"
            let extracted = try await runExecutable(URL(fileURLWithPath: "/usr/bin/dpkg-deb"), ["-x", deb, root])
            #expect(extracted.status == 0, "\(extracted.error)")
            for file in [
                "usr/bin/herald", "lib/systemd/system/herald.service", "lib/systemd/system/herald.socket", "etc/herald/herald.yaml",
                "usr/include/herald/herald_plugin.h", "usr/share/man/man1/herald.1.gz",
                "usr/share/bash-completion/completions/herald", "usr/share/zsh/vendor-completions/_herald",
                "usr/share/fish/vendor_completions.d/herald.fish", "usr/share/doc/herald/copyright",
            ] {
                #expect(FileManager.default.fileExists(atPath: "\(root)/\(file)"), "\(file) missing")
            }
            let control = try await runExecutable(URL(fileURLWithPath: "/usr/bin/dpkg-deb"), ["-I", deb])
            #expect(control.output.contains("Package: herald") && control.output.contains("conffiles"), "\(control.output)")
            let version = try await runExecutable(URL(fileURLWithPath: "\(root)/usr/bin/herald"), ["--version"])
            #expect(version.status == 0 && !version.output.isEmpty)
            // Without a running systemd (no /run/systemd/system) the maintainer scripts have nothing to do and
            // succeed.
            if !FileManager.default.fileExists(atPath: "/run/systemd/system") {
                for (script, argument) in [("postinst", "configure"), ("postrm", "remove")] {
                    let extractedControl = "\(directory)/control"
                    _ = try await runExecutable(URL(fileURLWithPath: "/usr/bin/dpkg-deb"), ["-e", deb, extractedControl])
                    let ran = try await runExecutable(URL(fileURLWithPath: "/bin/sh"), ["\(extractedControl)/\(script)", argument])
                    #expect(ran.status == 0, "\(script): \(ran.error)")
                }
            }
            // The shipped configuration, moved to the test's directories and a free port.
            let port = try freeLoopbackPort()
            let shipped = try String(contentsOfFile: "\(root)/etc/herald/herald.yaml", encoding: .utf8)
            let configuration = shipped.replacingOccurrences(of: "127.0.0.1:8080", with: "127.0.0.1:\(port)")
                .replacingOccurrences(of: "/run/herald", with: directory)
                .replacingOccurrences(of: "/var/lib/herald", with: "\(directory)/data")
            #expect(configuration != shipped)
            try configuration.write(toFile: "\(directory)/herald.yaml", atomically: true, encoding: .utf8)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "\(root)/usr/bin/herald")
            process.arguments = ["serve", "--config", "\(directory)/herald.yaml"]
            process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("HERALD_") }
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try runWithNoSignalsBlocked(process)
            defer {
                process.interrupt()
                waitUntilExitWithoutSpinning(process)
            }
            let healthy = await eventually(timeout: .seconds(30)) {
                (try? httpRequest(port: port, "GET", "/healthz"))?.status == 200
            }
            #expect(healthy)
        }
    }
}
