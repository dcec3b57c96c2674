package urbpipe.hadoop;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsAction;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's raw local file system without a process per file (decision 0020).
 *
 * <p>Without Hadoop's native library (a pip-installed pyspark has none),
 * {@link RawLocalFileSystem} forks {@code chmod} to set a file's permission, which it does for
 * every file it creates, and {@code readlink} for every link status, which Hadoop's
 * {@code FileContext} asks before each rename: a Delta commit forked about 13 processes and a
 * streaming batch's offset and commit logs about 20, a few milliseconds each on a busy driver.
 * This class answers both through Java NIO, with the same results: the permission's nine bits
 * set by {@code chmod(2)}, and a path's link status read with {@code lstat(2)}. A sticky bit
 * and a path that is a symbolic link, which the job never makes, still go Hadoop's way.
 */
public class NioRawLocalFileSystem extends RawLocalFileSystem {

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    if (permission.getStickyBit()) {
      super.setPermission(p, permission);
      return;
    }
    Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission));
  }

  /**
   * Hadoop reads the link of {@code new File(f.toString())} (for a qualified path that string
   * starts with {@code file:} and is never a link) and, when it is none, answers
   * {@link #getFileStatus}: so does this, after asking NIO rather than {@code readlink}.
   */
  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    if (Files.isSymbolicLink(new File(f.toString()).toPath())) {
      return super.getFileLinkStatus(f);
    }
    return getFileStatus(f);
  }

  static Set<PosixFilePermission> posix(FsPermission permission) {
    Set<PosixFilePermission> out = EnumSet.noneOf(PosixFilePermission.class);
    add(out, permission.getUserAction(), PosixFilePermission.OWNER_READ,
        PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_EXECUTE);
    add(out, permission.getGroupAction(), PosixFilePermission.GROUP_READ,
        PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE);
    add(out, permission.getOtherAction(), PosixFilePermission.OTHERS_READ,
        PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE);
    return out;
  }

  private static void add(Set<PosixFilePermission> out, FsAction action,
      PosixFilePermission read, PosixFilePermission write, PosixFilePermission execute) {
    if (action.implies(FsAction.READ)) {
      out.add(read);
    }
    if (action.implies(FsAction.WRITE)) {
      out.add(write);
    }
    if (action.implies(FsAction.EXECUTE)) {
      out.add(execute);
    }
  }
}
