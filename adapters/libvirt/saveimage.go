package libvirt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// A libvirt QEMU save image (virsh save, DomainSaveFlags): a fixed header,
// a data block with the domain XML and a cookie, then QEMU's migration
// stream. The format is libvirt's own (src/qemu/qemu_saveimage.h); what is
// read here is checked so that another layout is refused, not misread.
const (
	saveMagic     = "LibvirtQemudSave"
	saveVersion   = 2
	saveHeaderLen = 16 + 19*4 // magic, then version, data_len, was_running, compressed, cookieOffset and 14 unused u32
	qemuVMMagic   = "QEVM"    // the migration stream's first bytes
)

// saveImage is what a clone of a save image needs from it.
type saveImage struct {
	header     [saveHeaderLen]byte
	dataLen    uint32
	xml        string
	cookie     []byte
	streamFrom int64 // where QEMU's stream starts
}

func (s *saveImage) u32(i int) uint32 {
	return binary.LittleEndian.Uint32(s.header[16+4*i:])
}

// readSaveImage reads and checks a save image's header and data block.
func readSaveImage(f io.ReaderAt) (saveImage, error) {
	var s saveImage
	if _, err := f.ReadAt(s.header[:], 0); err != nil {
		return s, fmt.Errorf("save image header: %w", err)
	}
	if string(s.header[:16]) != saveMagic {
		return s, errors.New("not a complete libvirt save image")
	}
	version, dataLen, compressed, cookieOff := s.u32(0), s.u32(1), s.u32(3), s.u32(4)
	if version != saveVersion {
		return s, fmt.Errorf("save image version %d, want %d", version, saveVersion)
	}
	if compressed != 0 {
		return s, errors.New("save image is compressed (qemu.conf save_image_format): a clone needs the raw format")
	}
	if dataLen == 0 || dataLen > 16<<20 || cookieOff >= dataLen {
		return s, fmt.Errorf("save image data block of %d bytes (cookie at %d)", dataLen, cookieOff)
	}
	data := make([]byte, dataLen)
	if _, err := f.ReadAt(data, saveHeaderLen); err != nil {
		return s, fmt.Errorf("save image data: %w", err)
	}
	end := bytes.IndexByte(data, 0)
	if end < 0 || (cookieOff != 0 && int(cookieOff) != end+1) {
		return s, errors.New("save image data block: the XML does not end where the cookie starts")
	}
	s.dataLen, s.xml = dataLen, string(data[:end])
	if cookieOff != 0 {
		c := data[cookieOff:]
		if n := bytes.IndexByte(c, 0); n >= 0 {
			c = c[:n]
		}
		s.cookie = c
	}
	s.streamFrom = saveHeaderLen + int64(dataLen)
	magic := make([]byte, len(qemuVMMagic))
	if _, err := f.ReadAt(magic, s.streamFrom); err != nil || string(magic) != qemuVMMagic {
		return s, errors.New("save image: no QEMU stream after the data block")
	}
	return s, nil
}

// readSaveImageFile is readSaveImage of the file at path.
func readSaveImageFile(path string) (saveImage, error) {
	f, err := os.Open(path)
	if err != nil {
		return saveImage{}, err
	}
	defer f.Close()
	return readSaveImage(f)
}

// writeClone writes a copy of the save image src (described by s) to dst
// with another domain XML; QEMU's stream is copied unchanged.
func writeClone(dst, src *os.File, s saveImage, xml string) error {
	data := make([]byte, s.dataLen)
	need := len(xml) + 1
	if s.cookie != nil {
		need += len(s.cookie) + 1
	}
	if need > len(data) || bytes.IndexByte([]byte(xml), 0) >= 0 {
		return fmt.Errorf("a clone's XML of %d bytes does not fit the save image's %d", len(xml), len(data))
	}
	copy(data, xml)
	hdr := s.header
	var cookieOff uint32
	if s.cookie != nil {
		cookieOff = uint32(len(xml) + 1) //nolint:gosec // bounded by dataLen above
		copy(data[cookieOff:], s.cookie)
	}
	binary.LittleEndian.PutUint32(hdr[16+4*4:], cookieOff)
	if _, err := dst.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := dst.Write(data); err != nil {
		return err
	}
	// io.Copy between two files uses copy_file_range: the ~100 MB stream
	// stays in the kernel.
	if _, err := src.Seek(s.streamFrom, io.SeekStart); err != nil {
		return err
	}
	_, err := io.Copy(dst, src)
	return err
}
