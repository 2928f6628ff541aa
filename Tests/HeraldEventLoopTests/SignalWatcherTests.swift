import Glibc
import HeraldTesting
import Testing

@testable import HeraldEventLoop

@Suite("Signal watching")
struct SignalWatcherTests {
    @Test("a watched signal runs its handler on the loop thread; close stops watching")
    func watchSignal() async throws {
        try await withRunningLoop { loop in
            let received = ByteCollector()
            let watcher: SignalWatcher = try await loop.submit {
                try SignalWatcher.watch(SIGUSR2, on: loop) { signal in
                    if loop.inEventLoop, signal == SIGUSR2 { [UInt8(1)].withUnsafeBytes { received.append($0) } }
                }
            }
            kill(getpid(), SIGUSR2)
            await received.waitForBytes(1)
            #expect(received.bytes == [1])
            try await loop.submit { watcher.close() }
        }
    }
}
