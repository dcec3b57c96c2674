package urbpipe.hadoop;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * Hadoop's checksummed local file system ({@code fs.file.impl}) over
 * {@link NioRawLocalFileSystem}: what {@code FileSystem.get} gives for {@code file:} paths
 * (Delta's log stores, Spark's writers and state store).
 */
public class NioLocalFileSystem extends LocalFileSystem {
  public NioLocalFileSystem() {
    super(new NioRawLocalFileSystem());
  }
}
