import Foundation
import HeraldTesting
import Testing

@Suite("herald send and topics: https URLs")
struct SendOverHTTPSTests {
    @Test("https URLs: sent when --ca-file trusts the server's certificate, refused with a certificate error otherwise")
    func https() async throws {
        try await withTemporaryDirectory { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let server = try await PythonHTTPServer.start(certificate: certificates.certificateFile, key: certificates.keyFile)
            defer { server.stop() }
            let message = ["--project-id", "demo", "--token", "abc", "--data", "a=b"]

            let sent = try await runHerald(
                ["send", "--http", "\(server.baseURL)/", "--ca-file", certificates.caFile] + message,
                environment: ["HERALD_AUTH_TOKEN": "s3cret"])
            #expect(sent.status == 0, "\(sent.output)\(sent.error)")
            #expect(sent.output.contains("projects/demo/messages/42"), "\(sent.output)")
            #expect(sent.output.contains("Bearer s3cret"), "the bearer secret went along: \(sent.output)")

            let untrusted = try await runHerald(["send", "--http", server.baseURL] + message)
            #expect(untrusted.status != 0)
            #expect(untrusted.error.contains("is not trusted"), "\(untrusted.error)")

            let badURL = try await runHerald(["send", "--http", "ftp://localhost:\(server.port)"] + message)
            #expect(badURL.status == 64)
            #expect(badURL.error.contains("--http must be HOST:PORT or an http:// or https:// URL"), "\(badURL.error)")
            let badTopicsURL = try await runHerald([
                "topics", "subscribe", "--data-dir", directory, "--http", "ftp://localhost:1", "storms",
            ])
            #expect(badTopicsURL.status == 64)
            #expect(badTopicsURL.error.contains("--http must be HOST:PORT or an http:// or https:// URL"), "\(badTopicsURL.error)")
        }
    }

    @Test(
        "the proxy variables are honoured as curl honours them: https_proxy tunnels, http_proxy relays, no_proxy bypasses; never for localhost, 127.0.0.1 and ::1; --proxy"
    )
    func proxyVariables() async throws {
        try await withTemporaryDirectory { directory in
            let certificates = try await TestCertificates.make(in: directory)
            // On 127.0.0.2: loopback, but not one of the names the environment's proxies are never used for.
            let server = try await PythonHTTPServer.start(
                certificate: certificates.certificateFile, key: certificates.keyFile, host: "127.0.0.2")
            defer { server.stop() }
            let plain = try await PythonHTTPServer.start(host: "127.0.0.2")
            defer { plain.stop() }
            let local = try await PythonHTTPServer.start()
            defer { local.stop() }
            let proxy = try await TinyProxy(directory: directory)
            let message = ["--project-id", "demo", "--token", "abc", "--data", "a=b"]
            let https = ["send", "--http", server.baseURL, "--ca-file", certificates.caFile] + message

            // https: a CONNECT tunnel through the proxy, the daemon's certificate still checked at this end.
            for variable in ["https_proxy", "HTTPS_PROXY", "all_proxy"] {
                let before = proxy.requests.count
                let sent = try await runHerald(https, environment: [variable: proxy.url])
                #expect(sent.status == 0, "\(variable): \(sent.output)\(sent.error)")
                #expect(sent.output.contains("projects/demo/messages/42"), "\(sent.output)")
                #expect(proxy.requests.dropFirst(before) == ["CONNECT 127.0.0.2:\(server.port) HTTP/1.1"], "\(variable): \(proxy.requests)")
            }
            let untrusted = try await runHerald(["send", "--http", server.baseURL] + message, environment: ["https_proxy": proxy.url])
            #expect(untrusted.status != 0)
            #expect(untrusted.error.contains("is not trusted"), "through a proxy too: \(untrusted.error)")

            // http: the request itself goes to the proxy.
            let before = proxy.requests.count
            let relayed = try await runHerald(["send", "--http", plain.baseURL] + message, environment: ["http_proxy": proxy.url])
            #expect(relayed.status == 0, "\(relayed.output)\(relayed.error)")
            #expect(
                proxy.requests.dropFirst(before) == ["POST \(plain.baseURL)/v1/projects/demo/messages:send HTTP/1.1"], "\(proxy.requests)")

            // no_proxy (a host, a list, *) and NO_PROXY: straight to the daemon.
            let seen = proxy.requests
            for bypass in [["no_proxy": "127.0.0.2"], ["NO_PROXY": "example.com,127.0.0.2"], ["no_proxy": "*"]] {
                let direct = try await runHerald(https, environment: bypass.merging(["https_proxy": proxy.url]) { $1 })
                #expect(direct.status == 0, "\(bypass): \(direct.output)\(direct.error)")
            }
            let plainDirect = try await runHerald(
                ["send", "--http", plain.baseURL] + message, environment: ["http_proxy": proxy.url, "no_proxy": "127.0.0.2"])
            #expect(plainDirect.status == 0, "\(plainDirect.output)\(plainDirect.error)")
            #expect(proxy.requests == seen, "no_proxy bypasses the proxy: \(proxy.requests)")

            // A request to this machine by its usual names never goes to the environment's proxy, whatever no_proxy
            // says: the proxy would see the bearer secret.
            let localURL = local.baseURL.replacingOccurrences(of: "127.0.0.1", with: "localhost")
            for (url, variables) in [
                (local.baseURL, ["http_proxy": proxy.url]), (localURL, ["http_proxy": proxy.url, "no_proxy": "example.com"]),
                (local.baseURL, ["all_proxy": proxy.url, "NO_PROXY": "example.com"]),
            ] {
                let environment = variables.merging(["HERALD_AUTH_TOKEN": "secret"]) { $1 }
                let sent = try await runHerald(["send", "--http", url] + message, environment: environment)
                #expect(sent.status == 0, "\(url) \(variables): \(sent.output)\(sent.error)")
            }
            #expect(proxy.requests == seen, "a loopback request went to the proxy: \(proxy.requests)")

            // --proxy names one explicitly, whatever the environment says.
            let explicit = try await runHerald(https + ["--proxy", proxy.url], environment: ["https_proxy": "http://127.0.0.1:1"])
            #expect(explicit.status == 0, "\(explicit.output)\(explicit.error)")
            #expect(proxy.requests.dropFirst(seen.count) == ["CONNECT 127.0.0.2:\(server.port) HTTP/1.1"], "\(proxy.requests)")
        }
    }
}

extension SendOverHTTPSTests {
    /// A shared object that `LD_PRELOAD` puts into `herald`, compiled by the toolchain's clang. In the file
    /// `HERALD_TEST_EXIT_TRACE` names it writes:
    /// - `SSL_free` when OpenSSL's `SSL_free` is called and `SSL_free done` when it returns, 20 ms later: made slow,
    ///   so that work left to another thread cannot finish by chance before the process exits;
    /// - `thread exit` when the thread that called `SSL_free` (the loop's) ends, 20 ms after its thread-local
    ///   destructors start, where OpenSSL frees that thread's state;
    /// - `exit` when `exit` is called.
    /// An exit handler registered before any library's, hence run after all of them (OpenSSL's cleanup included),
    /// keeps the process 200 ms longer: what another thread still does when the process exits shows after `exit`.
    static let exitTraceSource = #"""
        #define _GNU_SOURCE
        #include <dlfcn.h>
        #include <fcntl.h>
        #include <pthread.h>
        #include <stdlib.h>
        #include <string.h>
        #include <unistd.h>

        static void note(const char *event) {
            const char *path = getenv("HERALD_TEST_EXIT_TRACE");
            if (!path) return;
            int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0600);
            if (fd < 0) return;
            (void)write(fd, event, strlen(event));
            close(fd);
        }
        static pthread_key_t ending;
        static void threadEnds(void *value) {
            (void)value;
            usleep(20000);
            note("thread exit\n");
        }
        static void last(void) { usleep(200000); }
        __attribute__((constructor)) static void first(void) {
            pthread_key_create(&ending, threadEnds);
            atexit(last);
        }
        void SSL_free(void *ssl) {
            static void (*real)(void *);
            if (!real) real = (void (*)(void *))dlsym(RTLD_NEXT, "SSL_free");
            note("SSL_free\n");
            pthread_setspecific(ending, (void *)1);
            usleep(20000);
            real(ssl);
            note("SSL_free done\n");
        }
        void exit(int status) {
            static void (*real)(int);
            if (!real) real = (void (*)(int))dlsym(RTLD_NEXT, "exit");
            note("exit\n");
            real(status);
            _exit(status);
        }
        """#

    @Test(
        "herald send over https closes its TLS connection and ends its loop thread before the process exits, not beside OpenSSL's exit handler",
        .disabled(if: runningUnderThreadSanitizer || runningUnderAddressSanitizer, "a preloaded library beside a sanitizer's runtime")
    )
    func tlsClosedBeforeExit() async throws {
        try await withTemporaryDirectory { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let server = try await PythonHTTPServer.start(certificate: certificates.certificateFile, key: certificates.keyFile)
            defer { server.stop() }
            try Self.exitTraceSource.write(toFile: "\(directory)/exit-trace.c", atomically: true, encoding: .utf8)
            let compiled = try await runExecutable(
                URL(fileURLWithPath: "/usr/bin/env"),
                ["clang", "-shared", "-fPIC", "-O1", "-o", "\(directory)/exit-trace.so", "\(directory)/exit-trace.c", "-ldl"])
            try #require(compiled.status == 0, "clang: \(compiled.error)")
            let trace = "\(directory)/trace"
            let sent = try await runHerald(
                [
                    "send", "--http", server.baseURL, "--ca-file", certificates.caFile, "--project-id", "demo", "--token", "abc", "--data",
                    "a=b",
                ],
                environment: ["LD_PRELOAD": "\(directory)/exit-trace.so", "HERALD_TEST_EXIT_TRACE": trace])
            #expect(sent.status == 0, "\(sent.output)\(sent.error)")
            #expect(sent.output.contains("projects/demo/messages/42"), "\(sent.output)")
            let events = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n")
            #expect(events.contains("SSL_free done"), "the TLS connection was never freed: \(events)")
            #expect(events.contains("thread exit"), "the thread that freed it never ended: \(events)")
            #expect(events.last == "exit", "the loop thread was still at work when the process exited: \(events)")
        }
    }
}
