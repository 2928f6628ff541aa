/// Facts about this build of Herald.
public enum HeraldBuild {
    /// The version of the Herald package.
    public static let version = "0.1.0"
}
