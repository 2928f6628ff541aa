/// Why a dynamic plugin was refused at load time, or why a call into it failed. Every load-time case names the
/// library's path; those that come from the dynamic linker carry its `dlerror()` text.
public enum DynamicPluginError: Error, Sendable, Hashable, CustomStringConvertible {
    /// There is no file at `path`.
    case fileNotFound(path: String)
    /// The file, or the directory it is in, can be changed by someone other than root and the user Herald runs as
    /// (writable by its group or by others, or owned by another user): that someone could run code inside Herald.
    case unsafePermissions(path: String, reason: String)
    /// `dlopen` refused the file: not a shared object, built for another architecture, a missing dependency, ...
    case notLoadable(path: String, reason: String)
    /// The library does not export `herald_plugin_entry_v1`: it is not a Herald plugin, or one built for another ABI.
    case missingEntryPoint(path: String, symbol: String, reason: String)
    /// The library speaks another version of the plugin ABI than this Herald.
    case unsupportedABIVersion(path: String, found: UInt32, supported: UInt32)
    /// The entry point's descriptor cannot be used (it is NULL, has no name, or sets no handler function).
    case invalidDescriptor(path: String, reason: String)
    /// The plugin's `init_plugin` returned an error status: it refused to load (with this configuration).
    case initFailed(path: String, plugin: String, status: Int32)
    /// `did_receive_message` returned an error status.
    case handlerFailed(plugin: String, call: String, status: Int32)
    /// The plugin could not be called: it was unloaded, or too many calls wait for its threads.
    case unavailable(plugin: String, reason: String)

    public var description: String {
        switch self {
        case .fileNotFound(let path):
            "cannot load plugin \(path): no such file"
        case .unsafePermissions(let path, let reason):
            "cannot load plugin \(path): \(reason)"
        case .notLoadable(let path, let reason):
            "cannot load plugin \(path): not a loadable shared object (\(reason))"
        case .missingEntryPoint(let path, let symbol, let reason):
            "cannot load plugin \(path): it does not export \(symbol), so it is not a Herald plugin of ABI version 1 (\(reason))"
        case .unsupportedABIVersion(let path, let found, let supported):
            "cannot load plugin \(path): it was built for plugin ABI version \(found); this Herald supports version \(supported) (rebuild it against this Herald's herald_plugin.h)"
        case .invalidDescriptor(let path, let reason):
            "cannot load plugin \(path): \(reason)"
        case .initFailed(let path, let plugin, let status):
            "cannot load plugin \(path): its init_plugin (\(plugin)) failed with status \(status)"
        case .handlerFailed(let plugin, let call, let status):
            "plugin \(plugin): \(call) failed with status \(status)"
        case .unavailable(let plugin, let reason):
            "plugin \(plugin) cannot be called: \(reason)"
        }
    }
}
